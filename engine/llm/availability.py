"""Whether the LLM parts can run, and the one plain notice when they cannot.

Kept free of the anthropic import so the CLI and TUI can ask cheaply at start-up.
"""

from __future__ import annotations

import logging
import threading
from typing import Mapping

log = logging.getLogger("kbench.llm")

NO_KEY_MESSAGE = ("No ANTHROPIC_API_KEY is set, so the anthropic proposer and the LLM verifiers are off. "
                  "The tuner, replay and human proposers work without it.")

_notice_lock = threading.Lock()
_notice_given = False


def api_key_from_env(env: Mapping[str, str] | None = None) -> str | None:
    if env is None:  # kbench's own environment: the key may have been moved out of it (engine.secrets)
        from engine import secrets
        return secrets.get("ANTHROPIC_API_KEY")
    return env.get("ANTHROPIC_API_KEY") or None


def llm_available(env: Mapping[str, str] | None = None) -> bool:
    """Whether LLM proposers and verifiers can run: the check the CLI and TUI use."""
    return api_key_from_env(env) is not None


def no_key_notice(env: Mapping[str, str] | None = None) -> str | None:
    """The plain 'no API key' message, the first time it applies in this process; None afterwards or when a
    key is set. It is also logged once, so callers may just call this and ignore the result."""
    global _notice_given
    if llm_available(env):
        return None
    with _notice_lock:
        if _notice_given:
            return None
        _notice_given = True
    log.warning(NO_KEY_MESSAGE)
    return NO_KEY_MESSAGE


def _reset_notice_for_tests() -> None:
    global _notice_given
    with _notice_lock:
        _notice_given = False
