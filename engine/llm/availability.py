"""Whether the LLM parts can run, and the one plain notice when they cannot.

Kept free of the SDK imports so the CLI and TUI can ask cheaply at start-up. The key lives only in the
environment: ANTHROPIC_API_KEY for the Messages API, the variable `[llm] api_key_env` names (default
OPENAI_API_KEY) for an OpenAI-compatible endpoint, or none at all when `api_key_env = ""` (a local server).
"""

from __future__ import annotations

import logging
import threading
from typing import Mapping

from engine import secrets
from engine.config.sections import LLMConfig

log = logging.getLogger("kbench.llm")

NO_KEY_MESSAGE = ("No ANTHROPIC_API_KEY is set, so the anthropic proposer and the LLM verifiers are off. "
                  "The tuner, replay and human proposers work without it.")

_notice_lock = threading.Lock()
_notice_given = False


def _key_env(config: LLMConfig | None = None) -> str:
    return config.key_env() if config is not None else "ANTHROPIC_API_KEY"


def no_key_message(config: LLMConfig | None = None) -> str:
    var = _key_env(config)
    if var == "ANTHROPIC_API_KEY":
        return NO_KEY_MESSAGE
    return (f"No {var} is set (the key of the {getattr(config, 'base_url', '') or 'OpenAI-compatible'} endpoint), "
            "so the LLM proposer and the LLM verifiers are off. Set it, or `api_key_env = \"\"` in [llm] for a "
            "local server that needs no key. The tuner, replay and human proposers work without it.")


def api_key_from_env(env: Mapping[str, str] | None = None, config: LLMConfig | None = None) -> str | None:
    var = _key_env(config)
    if var == "":
        return "not-needed"      # a local endpoint without authentication; the SDK still wants a string
    if env is None:  # kbench's own environment: the key was moved out of it at start (engine.secrets)
        return secrets.get(var)
    return env.get(var) or None


def llm_available(env: Mapping[str, str] | None = None, config: LLMConfig | None = None) -> bool:
    """Whether LLM proposers and verifiers can run: the check the CLI and TUI use."""
    return api_key_from_env(env, config) is not None


def no_key_notice(env: Mapping[str, str] | None = None, config: LLMConfig | None = None) -> str | None:
    """The plain 'no API key' message, the first time it applies in this process; None afterwards or when a
    key is set. It is also logged once, so callers may just call this and ignore the result."""
    global _notice_given
    if llm_available(env, config):
        return None
    with _notice_lock:
        if _notice_given:
            return None
        _notice_given = True
    msg = no_key_message(config)
    log.warning(msg)
    return msg


def _reset_notice_for_tests() -> None:
    global _notice_given
    with _notice_lock:
        _notice_given = False
