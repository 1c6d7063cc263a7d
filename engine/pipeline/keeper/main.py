"""The keeper of a kept judge: `python -m engine.pipeline.keeper SETTINGS_JSON`, started detached by `kbench eval`
after its verdict (engine/pipeline/kept_judge.py) so that the next `kbench eval` on the same GPU finds a judge up.

It is kbench's own trusted process and runs no candidate code. It starts one standby judge (the warm pool's kind of
spare: torch, the CUDA context, the jailed runner up to the timing helper's signed hello, no request yet), then
listens on a unix socket in its folder (mode 0700, the user's own) for `idle_s` seconds:

- a connection from another user, or one that does not say `claim` with the token in its folder (a second lock
  beside the seccomp filter that keeps jailed steps from connecting: Landlock keeps them from reading it), is closed;
- the first `claim` takes it: the socket is removed (no one else can claim it), `claimed` is answered, and the
  client's request line is handed to the judge; the judge's outcome goes back as one line;
- while the judge works, the client's connection is its lifeline: when it closes (the `kbench eval` that claimed
  it exited, was killed, or gave up), the judge's step is stopped at once, runner and all. So the judge dies with
  the kbench that is using it, as a judge started by that kbench would;
- a client that lets go before it sends a request (bad input, a failed build) puts it back on offer;
- when `idle_s` pass unclaimed, or the judge dies, it lets the judge go and removes its folder.

A killed keeper takes its judge with it: the judge's supervisor has the keeper as its parent (parent-death signal).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import select
import shutil
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

from engine.pipeline.protocol.result import STANDBY_STATE, StandbyState
from engine.procs import ChildOutcome, StandbyChild, start_ticks

JUDGE = "engine.pipeline.judge"
STATE, SOCK, TOKEN = "keeper.json", "sock", "token"
UP_WITHIN_S = 300.0          # a judge not up by then is let go (a GPU held by others, a machine under load)
CLAIM_LINE_S = 2.0           # a connection must say `claim` within this long
MAX_LINE = 256 << 20         # a request line (the judge's request is kilobytes; this is a bound, not a size)


@dataclasses.dataclass(frozen=True)
class Settings:
    folder: str
    timer_so: str
    timer_module: str
    gpu: int | None
    idle_s: float


def write_state(folder: Path, state: str, pid: int | None = None, **extra: Any) -> None:
    """The keeper's state file, rewritten whole: who it is (pid, default this process's, and start time, against pid
    reuse) and how far."""
    pid = os.getpid() if pid is None else pid
    data = {"pid": pid, "ticks": start_ticks(pid), "state": state, "at": time.time(), **extra}
    tmp = folder / f"{STATE}.{pid}"
    tmp.write_text(json.dumps(data))
    os.replace(tmp, folder / STATE)


def peer_cred(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end, from the kernel (SO_PEERCRED), not from what it says."""
    pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid, uid


def read_line(conn: socket.socket, timeout_s: float | None, limit: int = MAX_LINE) -> bytes | None:
    """One newline-ended line; None on EOF, a timeout, an error or a line past `limit`."""
    conn.settimeout(timeout_s)
    buf = bytearray()
    try:
        while not buf.endswith(b"\n"):
            chunk = conn.recv(1 << 16)
            if not chunk or len(buf) + len(chunk) > limit:
                return None
            buf += chunk
    except OSError:
        return None
    return bytes(buf[:-1])


def main(argv: list[str]) -> int:
    s = Settings(**json.loads(argv[0]))
    folder = Path(s.folder)
    # `kbench judges --stop`: let the judge go and remove the folder, as at the end of the idle time
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        return _keep(s, folder)
    finally:
        _remove(folder)


def _remove(folder: Path) -> None:
    """The folder goes, unless a newer keeper has taken it over (its state file names another pid)."""
    try:
        if json.loads((folder / STATE).read_text()).get("pid") not in (os.getpid(), None):
            return
    except (OSError, ValueError):
        pass
    shutil.rmtree(folder, ignore_errors=True)


def _keep(s: Settings, folder: Path) -> int:
    write_state(folder, "warming")
    child = StandbyChild(JUDGE, [s.timer_so, s.timer_module], gpu=s.gpu)
    try:
        return _hold(s, folder, child)
    finally:
        child.stop()        # whatever ended the keeper (nothing happens to a judge that has ended)


def _hold(s: Settings, folder: Path, child: StandbyChild) -> int:
    deadline = time.monotonic() + UP_WITHIN_S
    while (state := StandbyState.read(child.state(STANDBY_STATE))) is None:
        if not child.alive() or time.monotonic() > deadline:
            return 0                   # _keep stops it
        time.sleep(0.05)
    if not state.ok:                   # its trouble is not the next candidate's: nothing is kept
        return 0
    token = secrets.token_hex(16)
    fd = os.open(folder / TOKEN, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    idle_until = time.monotonic() + s.idle_s
    while child.alive() and (left := idle_until - time.monotonic()) > 0:
        listener = _listen(folder, left)
        conn = _claim(listener, idle_until, child, token)
        listener.close()
        if conn is None:
            break
        served = _serve(conn, child)
        conn.close()
        if served:
            return 0
        # let go before any request: back on offer for what is left of its time
    child.discard()
    return 0


def _listen(folder: Path, left: float) -> socket.socket:
    """The socket, bound under a private name and then renamed into place, so a client never meets it half made;
    its folder's cwd-relative name keeps it clear of the 108-byte limit on socket paths."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{SOCK}.{os.getpid()}"
    os.chdir(folder)
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    listener.bind(tmp)
    os.chmod(tmp, 0o600)
    listener.listen(8)
    os.replace(tmp, SOCK)
    write_state(folder, "ready", idle_until=time.time() + left)
    return listener


def _claim(listener: socket.socket, idle_until: float, child: StandbyChild, token: str) -> socket.socket | None:
    """The first connection of this user that says `claim` with the token, answered `claimed`; None once idle or
    the judge died.
    The socket is removed before the answer: a second client cannot find it."""
    uid = os.getuid()
    while child.alive() and (left := idle_until - time.monotonic()) > 0:
        listener.settimeout(min(left, 1.0))
        try:
            conn, _ = listener.accept()
        except (TimeoutError, socket.timeout):
            continue
        except OSError:
            return None
        try:
            _pid, peer = peer_cred(conn)
        except OSError:
            conn.close()
            continue
        if peer != uid or read_line(conn, CLAIM_LINE_S, 128) != f"claim {token}".encode():
            conn.close()
            continue
        try:
            os.unlink(SOCK)
        except FileNotFoundError:
            pass
        try:
            conn.sendall(b"claimed\n")
        except OSError:
            conn.close()
            return None
        write_state(Path.cwd(), "claimed")
        return conn
    return None


def _serve(conn: socket.socket, child: StandbyChild) -> bool:
    """The claimer's one request, judged while its connection lives. False: it let go before sending one."""
    line = read_line(conn, None)
    if line is None:
        return False
    try:
        msg = json.loads(line)
        request, timeout_s = dict(msg["request"]), float(msg["timeout_s"])
    except (ValueError, KeyError, TypeError):
        return False
    done: dict[str, ChildOutcome] = {}
    worker = threading.Thread(target=lambda: done.setdefault("outcome", child.run(request, timeout_s)), daemon=True)
    worker.start()
    while worker.is_alive():
        readable, _, _ = select.select([conn], [], [], 0.2)
        if readable:
            try:
                gone = not conn.recv(1, socket.MSG_PEEK)
            except OSError:
                gone = True
            if gone:                    # the kbench that claimed it is gone: so is its judge
                child.stop()
                worker.join(timeout=30)
                return True
            time.sleep(0.2)             # it said something: nothing is expected, so do not spin on it
    try:
        conn.sendall(json.dumps({"outcome": dataclasses.asdict(done["outcome"])}).encode() + b"\n")
    except (OSError, KeyError):
        pass
    return True
