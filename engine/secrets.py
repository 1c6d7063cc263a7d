"""API keys: read once when kbench starts, then kept where no other process can read them.

A key in a process's environment is readable through /proc/<pid>/environ by any process of the same user (and
by root): removing it from os.environ is not enough, because /proc shows the block the process started with.
So `protect()`, called first thing by kbench's entry points, moves every key-like variable out of the
environment, re-executes kbench with the clean environment (handing the keys over through a pipe that is read
and closed at once), and makes the process non-dumpable, which closes /proc/<pid>/mem, environ and ptrace to
processes without CAP_SYS_PTRACE. Children (the judge, compilers, runners) never get a key either:
engine.procs builds their environments from an allowlist.
"""

from __future__ import annotations

import json
import os
import re
import sys

from engine.config.env import SECRETS_FD_ENV as SECRETS_FD
from engine.config.env import take_secrets_fd
from engine.jail import privileges

_KEY_LIKE = re.compile(r"(API_KEY|SECRET_KEY|_TOKEN)$")   # ANTHROPIC_API_KEY, OPENAI_API_KEY, HF_TOKEN...
_store: dict[str, str] = {}


def is_secret_name(name: str) -> bool:
    return bool(_KEY_LIKE.search(name.upper()))


def get(name: str) -> str | None:
    """A key kbench was started with (moved out of the environment), or one set in it since."""
    return _store.get(name) or os.environ.get(name) or None


def protect() -> None:
    """Move keys out of the environment, re-exec without them, become non-dumpable. Idempotent."""
    fd = take_secrets_fd()
    if fd is not None:  # the re-executed process: take the keys from the pipe
        with os.fdopen(fd, "r") as fh:
            _store.update(json.load(fh))
        privileges.set_dumpable(False)
        return
    found = {k: v for k, v in os.environ.items() if is_secret_name(k) and v}
    if not found:
        return
    r, w = os.pipe()
    os.write(w, json.dumps(found).encode())  # a few hundred bytes: fits the pipe, no reader needed yet
    os.close(w)
    os.set_inheritable(r, True)
    env = {k: v for k, v in os.environ.items() if k not in found}
    env[SECRETS_FD] = str(r)
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    try:
        os.execve(sys.executable, [sys.executable, *argv[1:]], env)
    except OSError:  # cannot re-exec: at least keep the keys out of what children and os.environ see
        os.close(r)
        _store.update(found)
        for k in found:
            del os.environ[k]
        privileges.set_dumpable(False)
