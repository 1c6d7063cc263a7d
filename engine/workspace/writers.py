"""One writer per session, across processes and machines that share the workspace.

A process that drives a session (`kbench evolve`, `kbench reevaluate`, the app's loop) *claims* it for as
long as it runs: an exclusive `flock` (a `filelock.FileLock`) on `<git-dir>/kbench-sessions/<session>.flock`, plus a holder record
beside it (`<session>.holder.json`: pid, host, the process's start time, when, which command, a random
token) that a refused writer can name. One-shot writes (an override, a hand edit) claim the session only for
the instant of the write, under the workspace's writer lock. Readers never claim anything.

Why both a lock and a record: the kernel drops a flock when its holder dies, so a killed writer never wedges
a session; the record says who holds it (a flock does not), and covers filesystems that do not carry locks
between machines: a record from another host whose heartbeat (the file's mtime, touched every
HEARTBEAT_S) is fresh means a live writer there, whatever the lock says. A record whose process is provably
gone (same host, pid dead or re-used: its start time differs) is stale and is replaced without asking.

`--take-over` (take_over=True) is for a holder the user knows is gone (a crashed machine): the lock file is
replaced, so whoever held the old one keeps a lock on a file nobody uses, and the record gets a new token.
A writer checks its token before every write (`check_write`), so a process that was taken over stops at
its next write with a clear error instead of writing beside the new one.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

from filelock import FileLock, Timeout

from engine.config import env_float
from engine.workspace.errors import (
    SessionBusyError,
    SessionTakenOverError,
    WorkspaceError,
)

CLAIM_DIR = "kbench-sessions"            # inside the git dir: derived, never committed or cloned
HEARTBEAT_S = 30.0                       # a holder touches its record this often
REMOTE_STALE_S = 3 * HEARTBEAT_S         # a record from another host untouched this long is a dead holder's
WAIT_S = env_float("KBENCH_CLAIM_WAIT_S")  # a busy session is retried this long before refusing


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


def _read_taker(git_dir: Path, session: str) -> Holder | None:
    try:
        obj = json.loads((claim_dir(git_dir) / f"{session}.taken-over.json").read_text())
        return Holder(int(obj["pid"]), str(obj["host"]), obj.get("started"), str(obj.get("since", "")),
                      str(obj.get("command", "kbench")), str(obj.get("token", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_holder(git_dir: Path, session: str, holder: Holder) -> None:
    d = claim_dir(git_dir)
    tmp = d / f".{session}.holder.{holder.token[:8]}.tmp"
    tmp.write_text(json.dumps(asdict(holder)) + "\n")
    os.replace(tmp, d / f"{session}.holder.json")


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class _LockedFileReplaced(Exception):
    """Raised from filelock's on_acquired hook: the file locked is no longer the one at the path."""


class _FlockFile:
    """An exclusive, non-blocking flock (a `filelock.FileLock`) on one path, re-checked against the path's
    inode: a take-over replaces the file (break_lock), and a lock on the replaced one guards nothing."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None
        self._lock: FileLock | None = None

    def try_lock(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            lock = FileLock(self.path, thread_local=False, on_acquired=self._check_same_file)
            try:
                lock.acquire(blocking=False)
            except Timeout:
                return False
            except _LockedFileReplaced:
                continue          # locked a file a take-over just replaced (filelock let it go): lock the new one
            self._lock = lock
            return True

    def _check_same_file(self, fd: int) -> None:
        try:
            same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            raise _LockedFileReplaced(str(self.path))
        self.fd = fd

    def unlock(self) -> None:
        lock, self._lock, self.fd = self._lock, None, None
        if lock is not None:
            lock.release()

    def break_lock(self) -> None:
        """Move the lock file aside (whoever holds it keeps a lock on a file nobody uses any more)."""
        try:
            aside = self.path.with_name(f".{self.path.name}.taken-over.{uuid.uuid4().hex[:8]}")
            os.replace(self.path, aside)
            os.unlink(aside)
        except FileNotFoundError:
            pass


# The claim stays kbench's own, over filelock's plain lock: it records who holds the session (pid, host, start
# time, command), judges a stale holder (a dead or re-used pid here, a silent heartbeat on another host), and
# lets a take-over stop the displaced writer at its next write. filelock's owner-recording locks (its soft and
# strict claims) are existence locks that a killed holder leaves behind, where a flock dies with its holder.
class SessionClaim:
    """A process's claim on one session (see the module doc). Re-entrant: `claim_session` counts users."""

    def __init__(self, git_dir: Path, session: str, command: str):
        self.git_dir = Path(git_dir)
        self.session = session
        self.command = command
        self.users = 0
        self.holder: Holder | None = None
        self._lock = _FlockFile(claim_dir(self.git_dir) / f"{session}.flock")

    @property
    def fd(self) -> int | None:
        return self._lock.fd

    def acquire(self, take_over: bool = False, wait_s: float = WAIT_S) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            if self._lock.try_lock():
                holder, age = read_holder(self.git_dir, self.session)
                if (holder is not None and not take_over and holder.host != this_host()
                        and holder.state(age) == "unknown"):
                    # The lock was free, yet a writer on another host touched its record moments ago: this
                    # filesystem does not carry locks between machines. Its record decides.
                    self._lock.unlock()
                    if time.monotonic() < deadline:
                        time.sleep(0.2)
                        continue
                    raise SessionBusyError(busy_message(self.session, holder, age))
                break
            if take_over:
                self._lock.break_lock()
                continue
            holder, age = read_holder(self.git_dir, self.session)
            waiting = holder is None or holder.state(age) == "dead"
            if waiting and time.monotonic() < deadline:
                time.sleep(0.05)   # a one-shot writer (no record), or a killed writer's git child finishing
                continue
            raise SessionBusyError(busy_message(self.session, holder, age))
        self.holder = Holder(os.getpid(), this_host(), process_start(os.getpid()), _now_iso(), self.command,
                             uuid.uuid4().hex)
        try:
            _write_holder(self.git_dir, self.session, self.holder)
            if take_over:  # outlives this claim's record: the writer it displaced can still name who did it
                (claim_dir(self.git_dir) / f"{self.session}.taken-over.json").write_text(
                    json.dumps(asdict(self.holder)) + "\n")
        except OSError as exc:
            self._lock.unlock()
            raise WorkspaceError(f"cannot record the writer of session {self.session!r} in "
                                 f"{claim_dir(self.git_dir)}: {exc}") from None
        _Heartbeat.add(self)

    def release(self) -> None:
        _Heartbeat.discard(self)
        mine = self.still_mine()
        if mine:
            try:
                (claim_dir(self.git_dir) / f"{self.session}.holder.json").unlink()
            except OSError:
                pass
        self._lock.unlock()
        self.holder = None

    def still_mine(self) -> bool:
        if self.holder is None:
            return False
        now, _ = read_holder(self.git_dir, self.session)
        return now is not None and now.token == self.holder.token

    def check(self) -> None:
        """Before a write: raise SessionTakenOverError where another process took the session over."""
        if self.still_mine():
            return
        now, _ = read_holder(self.git_dir, self.session)
        if now is None:  # the one who took over may have finished already: its marker stays
            now = _read_taker(self.git_dir, self.session)
        who = now.describe() if now is not None else "another process"
        raise SessionTakenOverError(f"session {self.session!r} was taken over by {who}; this process stopped "
                                    "writing to it (nothing more was written)")

    def touch(self) -> None:
        try:
            os.utime(claim_dir(self.git_dir) / f"{self.session}.holder.json")
        except OSError:
            pass


def busy_message(session: str, holder: Holder | None, age: float | None) -> str:
    """One line: who writes the session and what to do."""
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
    return (f"session {session!r} is being written by {who}. Wait for it to end, or, if you are sure it is gone, "
            "run again with --take-over.")


class _Heartbeat:
    """One daemon thread per process touches the record of every claim it holds."""

    _claims: set[SessionClaim] = set()
    _guard = threading.Lock()
    _thread: threading.Thread | None = None

    @classmethod
    def add(cls, claim: SessionClaim) -> None:
        with cls._guard:
            cls._claims.add(claim)
            if cls._thread is None or not cls._thread.is_alive():
                cls._thread = threading.Thread(target=cls._run, name="kbench-claim-heartbeat", daemon=True)
                cls._thread.start()

    @classmethod
    def discard(cls, claim: SessionClaim) -> None:
        with cls._guard:
            cls._claims.discard(claim)

    @classmethod
    def _run(cls) -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            with cls._guard:
                claims = list(cls._claims)
            for c in claims:
                c.touch()


# --------------------------------------------------------------------------------- process registry

_claims: dict[tuple[str, str], SessionClaim] = {}
_registry = threading.Lock()


@atexit.register
def _release_all() -> None:
    """At a normal exit, claims still held are released (their records removed); a kill leaves the record,
    which the next writer recognises as a dead process's."""
    with _registry:
        held = list(_claims.values())
        _claims.clear()
    for c in held:
        try:
            c.release()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


def _key(git_dir: Path, session: str) -> tuple[str, str]:
    return os.path.realpath(git_dir), session


class Claim:
    """A handle on this process's claim of a session; `release()` once (or use it as a context manager)."""

    def __init__(self, claim: SessionClaim):
        self._claim: SessionClaim | None = claim

    @property
    def holder(self) -> Holder | None:
        return self._claim.holder if self._claim else None

    def release(self) -> None:
        claim, self._claim = self._claim, None
        if claim is None:
            return
        with _registry:
            claim.users -= 1
            if claim.users > 0:
                return
            _claims.pop(_key(claim.git_dir, claim.session), None)
        claim.release()

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def claim(git_dir: Path, session: str, command: str, take_over: bool = False, wait_s: float = WAIT_S) -> Claim:
    """Claim `session` for this process (re-entrant within it). Raises SessionBusyError naming the holder."""
    key = _key(git_dir, session)
    with _registry:
        held = _claims.get(key)
        if held is not None:
            held.users += 1
            return Claim(held)
        c = SessionClaim(Path(key[0]), session, command)
        c.acquire(take_over=take_over, wait_s=wait_s)
        c.users = 1
        _claims[key] = c
        return Claim(c)


def held_claim(git_dir: Path, session: str) -> SessionClaim | None:
    with _registry:
        return _claims.get(_key(git_dir, session))


@contextmanager
def write_guard(git_dir: Path, session: str) -> Iterator[None]:
    """Around one write to `session` (under the workspace writer lock): where this process claims the
    session, check the claim is still its own; otherwise claim it for the instant of the write, refusing
    (SessionBusyError) while another process is its writer."""
    held = held_claim(git_dir, session)
    if held is not None:
        held.check()
        yield
        return
    c = SessionClaim(Path(os.path.realpath(git_dir)), session, "kbench")
    lock = c._lock
    if not lock.try_lock():
        holder, age = read_holder(c.git_dir, session)
        raise SessionBusyError(busy_message(session, holder, age))
    try:
        holder, age = read_holder(c.git_dir, session)
        if holder is not None and holder.host != this_host() and holder.state(age) == "unknown":
            raise SessionBusyError(busy_message(session, holder, age))
        yield
    finally:
        lock.unlock()


def claims_in(git_dir: Path) -> list[tuple[str, Holder | None, float | None, bool]]:
    """(session, holder record, heartbeat age, lock held by someone) for every session with a claim file."""
    d = claim_dir(git_dir)
    out = []
    if not d.is_dir():
        return out
    names = set()
    for p in d.iterdir():
        for suffix in (".flock", ".holder.json"):
            if p.name.endswith(suffix) and not p.name.startswith("."):
                names.add(p.name[:-len(suffix)])
    names = sorted(names)
    for session in names:
        holder, age = read_holder(git_dir, session)
        probe = _FlockFile(d / f"{session}.flock")
        mine = held_claim(git_dir, session) is not None
        locked = mine or not probe.try_lock()
        if probe.fd is not None:
            probe.unlock()
        out.append((session, holder, age, locked))
    return out
