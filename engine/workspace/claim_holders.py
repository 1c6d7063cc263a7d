"""Who holds a session: the holder record a session's writer keeps beside its lock
(`<git-dir>/kbench-sessions/<session>.holder.json`: pid, host, the process's start time, when, which command,
a random token), whether that holder is alive, dead or unknown, and the message a refused writer is given.

A record's mtime is its heartbeat (touched every HEARTBEAT_S): a record from another host untouched for
REMOTE_STALE_S is a dead holder's; one on this host is dead when its pid is gone or re-used (its start time
differs). Records are replaced whole (write a temp file, rename), so a reader never sees a torn one.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CLAIM_DIR = "kbench-sessions"            # inside the git dir: derived, never committed or cloned
HEARTBEAT_S = 30.0                       # a holder touches its record this often
REMOTE_STALE_S = 3 * HEARTBEAT_S         # a record from another host untouched this long is a dead holder's


def this_host() -> str:
    return socket.gethostname() or "localhost"


def process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), to tell a live holder from a re-used pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Holder:
    """Who claims a session: what a refused writer is told."""

    pid: int
    host: str
    started: int | None          # the process's start time (process_start), None where unknown
    since: str                   # when the claim was made (UTC, ISO 8601)
    command: str                 # "kbench evolve", "kbench reevaluate", "kbench app", ...
    token: str

    def describe(self) -> str:
        return f"{self.command} (pid {self.pid} on {self.host}, since {self.since})"

    def state(self, heartbeat_age: float | None = None) -> str:
        """"alive", "dead" (provably gone) or "unknown" (another host, recently seen)."""
        if self.host != this_host():
            if heartbeat_age is not None and heartbeat_age > REMOTE_STALE_S:
                return "dead"
            return "unknown"
        if not pid_alive(self.pid):
            return "dead"
        now = process_start(self.pid)
        if self.started is not None and now is not None and now != self.started:
            return "dead"   # the pid was re-used by another process
        return "alive"


def writing_elsewhere(holder: Holder | None, heartbeat_age: float | None) -> bool:
    """The rule for a free lock, one for the claim, a one-shot write and fsck alike: a record from another host
    whose heartbeat is fresh is a live writer there (the filesystem may not carry locks between machines), so it
    is neither replaced nor removed; only a silent heartbeat (REMOTE_STALE_S) makes it a dead writer's."""
    return holder is not None and holder.host != this_host() and holder.state(heartbeat_age) == "unknown"


def claim_dir(git_dir: Path) -> Path:
    return Path(git_dir) / CLAIM_DIR


def read_holder(git_dir: Path, session: str) -> tuple[Holder | None, float | None]:
    """The session's holder record and its heartbeat age in seconds (None, None: no record)."""
    path = claim_dir(git_dir) / f"{session}.holder.json"
    try:
        raw = path.read_bytes()
        age = time.time() - path.stat().st_mtime
        obj = json.loads(raw)
        return Holder(int(obj["pid"]), str(obj["host"]), obj.get("started"), str(obj.get("since", "")),
                      str(obj.get("command", "kbench")), str(obj.get("token", ""))), age
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, KeyError, TypeError):
        return None, None    # a torn or foreign record names nobody; the lock still decides


def read_taker(git_dir: Path, session: str) -> Holder | None:
    """Who took the session over last (the marker a take-over leaves, outliving its claim); None: nobody."""
    try:
        obj = json.loads((claim_dir(git_dir) / f"{session}.taken-over.json").read_text())
        return Holder(int(obj["pid"]), str(obj["host"]), obj.get("started"), str(obj.get("since", "")),
                      str(obj.get("command", "kbench")), str(obj.get("token", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_holder(git_dir: Path, session: str, holder: Holder) -> None:
    d = claim_dir(git_dir)
    tmp = d / f".{session}.holder.{holder.token[:8]}.tmp"
    tmp.write_text(json.dumps(asdict(holder)) + "\n")
    os.replace(tmp, d / f"{session}.holder.json")


def claim_stamp() -> str:
    """When a claim is made, as its record's `since` says it: UTC, ISO 8601, whole seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def busy_message(session: str, holder: Holder | None, age: float | None, one_shot: bool = False) -> str:
    """One line: who writes the session and what to do. `one_shot`: for a single write (an override, a hand
    edit), which waits for the writer and never takes a session over (`--take-over` is evolve's and
    reevaluate's)."""
    if holder is None:
        who = "another process (it left no record of itself)"
    else:
        state = holder.state(age)
        who = holder.describe()
        if state == "dead":
            who += (", which has exited; a process it started (a git command finishing its write?) still "
                    "holds the lock")
        elif state == "unknown":
            who += f", last seen {age:.0f} s ago" if age is not None else ""
    if one_shot:
        return (f"session {session!r} is being written by {who}. Wait for it to end (or stop it), then try again; "
                "nothing was written.")
    return (f"session {session!r} is being written by {who}. Wait for it to end, or, if you are sure it is gone, "
            "run again with --take-over.")
