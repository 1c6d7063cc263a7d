"""A judge kept between `kbench eval` commands: the client side of engine/pipeline/keeper.

A judge's start (torch, the CUDA context, the jailed runner up to the timing helper's signed hello) is the largest
part of a `kbench eval` of a built candidate. After its verdict, `kbench eval` leaves a keeper behind
(`keep_for_next`): a detached process holding one standby judge for `[eval] keep_judge_s` seconds (default 300;
0 or KBENCH_KEEP_JUDGE_S=0: none). The next `kbench eval` on the same GPU claims it (`claim`) instead of
starting one, and hands it its request as it would its own early judge (engine/pipeline/early_judge.py).

What makes it safe to reuse:
- it is the same trusted judge, serving one request; every candidate still gets a fresh jailed runner;
- only a judge of the same timing helper, GPU, engine sources and environment is claimed (`key_for`): a kbench
  updated or configured otherwise starts its own;
- the keeper's folder is the user's own (mode 0700, in $XDG_RUNTIME_DIR or ~/.local/state); both ends check the
  other's user id with the kernel (SO_PEERCRED), and the client also checks that the process at the other end is
  the keeper its state file names, and says the token the keeper left in its folder. Jailed steps cannot reach
  it: their seccomp filter denies `connect`, and Landlock keeps them out of the folder;
- the claiming kbench's connection is the judge's lifeline: if that kbench exits or is killed, the keeper stops
  the judge and its runner at once.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from engine.config.env import env_float, env_raw
from engine.pipeline.keeper.main import SOCK, STATE, TOKEN, Settings, peer_cred, read_line, write_state
from engine.pipeline.protocol.result import StandbyState
from engine.pipeline.protocol.types import TimerSpec
from engine.procs import ChildOutcome, running, scrubbed_env, start_ticks

KEEPER = "engine.pipeline.keeper"
SETTINGS = "settings.json"
WAIT_WARMING_S = 8.0     # a keeper's judge still coming up is waited for this long (less than a start of our own)
CONNECT_S = 2.0
ENGINE = Path(__file__).resolve().parents[1]
_STARTED: list[subprocess.Popen] = []


def kept_root(env: dict[str, str] | None = None) -> Path:
    """Where keepers live: the user's runtime folder (private, cleared at logout), else ~/.local/state."""
    env = dict(os.environ) if env is None else env
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "kbench" / "kept"
    state = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME", str(Path.home()))) / ".local" / "state")
    return Path(state) / "kbench" / "kept"


@functools.cache
def _sources_stamp() -> str:
    """The engine's sources as this process found them (newest change, count; walked once per process, not for each
    of a command's lookups): an edited or updated kbench starts its own."""
    newest, count = 0, 0
    for path in ENGINE.rglob("*.py"):
        try:
            newest = max(newest, path.stat().st_mtime_ns)
            count += 1
        except OSError:
            pass
    return f"{newest}:{count}"


def key_for(timer: TimerSpec, gpu: int | None) -> str:
    """What a kept judge must share with the evaluation that claims it."""
    blob = json.dumps({"timer": [timer.so_path, timer.module_name], "gpu": gpu, "python": sys.executable,
                       "engine": [str(ENGINE), _sources_stamp()], "env": sorted(scrubbed_env().items())})
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _private(folder: Path) -> bool:
    try:
        st = folder.stat()
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o077


def _state(folder: Path) -> dict[str, Any] | None:
    """The keeper's state, if its keeper is alive (the same pid and start time); a dead keeper's folder is removed."""
    try:
        state = json.loads((folder / STATE).read_text())
        pid, ticks = int(state["pid"]), state["ticks"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not running(pid, ticks):
        _clear(folder)
        return None
    return state


def _clear(folder: Path) -> None:
    for name in (STATE, SOCK):
        try:
            (folder / name).unlink()
        except OSError:
            pass


class KeptJudge:
    """A claimed kept judge, used where a StandbyChild would be (EarlyJudge, evaluate's early path)."""

    def __init__(self, conn: socket.socket):
        self.conn: socket.socket | None = conn

    def alive(self) -> bool:
        return self.conn is not None

    def state(self, name: str) -> dict[str, Any] | None:
        return dataclasses.asdict(StandbyState(True)) if self.conn is not None else None  # claimed only when up

    def run(self, request: dict[str, Any], timeout_s: float) -> ChildOutcome:
        """The request judged by the kept judge; a keeper that goes away without an answer reads as a judge that
        crashed before any config (evaluate then starts one cold, as for a spare)."""
        t0 = time.monotonic()
        conn, self.conn = self.conn, None
        if conn is None:
            return ChildOutcome({}, None, False, 0.0, "the kept judge was let go")
        try:
            conn.sendall(json.dumps({"request": request, "timeout_s": timeout_s}).encode() + b"\n")
            line = read_line(conn, timeout_s + 60.0)
        except OSError:
            line = None
        finally:
            conn.close()           # the keeper stops a judge still working: the lifeline
        seconds = time.monotonic() - t0
        try:
            outcome = ChildOutcome(**json.loads(line)["outcome"]) if line else None
        except (ValueError, KeyError, TypeError):
            outcome = None
        if outcome is None:
            timed_out = seconds >= timeout_s
            return ChildOutcome({}, None, timed_out, seconds, "the kept judge's keeper ended without an answer")
        return outcome

    def let_go(self, grace_s: float = 0.0) -> None:
        """Not needed: its keeper puts it back on offer."""
        self.stop()

    def stop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()


def claim(timer: TimerSpec, gpu: int | None, *, wait_s: float = WAIT_WARMING_S) -> KeptJudge | None:
    """The kept judge for an evaluation on `gpu` with `timer`, claimed; None where there is none (or another
    evaluation claimed it first). One still coming up is waited for, up to `wait_s`."""
    folder = kept_root() / key_for(timer, gpu)
    if not _private(folder):
        return None
    deadline = time.monotonic() + wait_s
    while (state := _state(folder)) is not None:
        if state.get("state") == "ready":
            return _connect(folder, int(state["pid"]))
        if state.get("state") != "warming" or time.monotonic() > deadline:
            return None
        time.sleep(0.05)
    return None


def warming(timer: TimerSpec, gpu: int | None) -> bool:
    """Whether a keeper for an evaluation on `gpu` with `timer` is still starting its judge."""
    folder = kept_root() / key_for(timer, gpu)
    return _private(folder) and (state := _state(folder)) is not None and state.get("state") == "warming"


def _connect(folder: Path, keeper_pid: int) -> KeptJudge | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fd = -1
    try:
        fd = os.open(folder, os.O_PATH | os.O_DIRECTORY)
        conn.settimeout(CONNECT_S)
        conn.connect(f"/proc/self/fd/{fd}/{SOCK}")     # short, whatever the folder's path length
        pid, uid = peer_cred(conn)
        if uid != os.getuid() or pid != keeper_pid:
            raise ConnectionRefusedError("not the keeper its state names")
        token = (folder / TOKEN).read_text().strip()
        conn.sendall(f"claim {token}\n".encode())
        if read_line(conn, CONNECT_S, 64) != b"claimed":
            raise ConnectionRefusedError("not claimed")
    except OSError:
        conn.close()
        return None
    finally:
        if fd >= 0:
            os.close(fd)
    return KeptJudge(conn)


def keep_for_next(timer: TimerSpec, gpu: int | None, idle_s: float) -> bool:
    """Leave a keeper behind for the next evaluation on `gpu`, unless one is there already; True if started."""
    if idle_s <= 0:
        return False
    root = kept_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not _private(root):
        return False
    folder = root / key_for(timer, gpu)
    folder.mkdir(mode=0o700, exist_ok=True)
    try:
        with FileLock(str(root / ".lock"), timeout=2):
            if not _private(folder) or _state(folder) is not None:
                return False
            settings = Settings(str(folder), timer.so_path, timer.module_name, gpu, float(idle_s))
            (folder / SETTINGS).write_text(json.dumps(dataclasses.asdict(settings)))   # for `kbench judges`
            # its own session: no terminal's signals, and it outlives this command by design (module docstring)
            proc = subprocess.Popen([sys.executable, "-m", KEEPER, json.dumps(dataclasses.asdict(settings))],
                                    cwd=folder, env=scrubbed_env(), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            # its state at once, under the lock: a second command finds it warming and starts no other
            write_state(folder, "warming", pid=proc.pid)
            _STARTED.append(proc)   # not waited for: it outlives this command, and init reaps it
            return True
    except (Timeout, OSError):
        return False


def keep_seconds(configured: float) -> float:
    """`[eval] keep_judge_s`, unless KBENCH_KEEP_JUDGE_S says otherwise (a value that does not parse is an error
    naming the variable)."""
    return max(env_float("KBENCH_KEEP_JUDGE_S", default=configured), 0.0) if env_raw("KBENCH_KEEP_JUDGE_S") \
        else configured


@dataclasses.dataclass(frozen=True)
class Kept:
    """One judge kept now, as `kbench judges` lists it."""
    pid: int
    state: str                  # warming | ready | claimed
    gpu: int | None
    since_s: float              # seconds since its keeper last changed state
    left_s: float | None        # seconds before it ends unclaimed (ready only)
    folder: str


def kept_now() -> list[Kept]:
    """The judges kept for this user now (keepers alive), in any folder of kept_root()."""
    out = []
    root = kept_root()
    for folder in sorted(root.glob("*")) if _private(root) else []:
        if not folder.is_dir() or (state := _state(folder)) is None:
            continue
        try:
            gpu = json.loads((folder / SETTINGS).read_text()).get("gpu")
        except (OSError, ValueError):
            gpu = None
        now = time.time()
        until = state.get("idle_until")
        out.append(Kept(int(state["pid"]), str(state.get("state")), gpu, round(now - float(state.get("at", now)), 1),
                        round(max(float(until) - now, 0.0), 1) if until and state.get("state") == "ready" else None,
                        str(folder)))
    return out


def stop_kept(kept: list[Kept], wait_s: float = 10.0) -> list[Kept]:
    """End these keepers (SIGTERM: each lets its judge go and removes its folder); those still alive after."""
    ticks = {k.pid: start_ticks(k.pid) for k in kept}
    for k in kept:
        if running(k.pid, ticks[k.pid]):
            try:
                os.kill(k.pid, signal.SIGTERM)
            except OSError:
                pass
    deadline = time.monotonic() + wait_s
    left = kept
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [k for k in left if running(k.pid, ticks[k.pid])]
    return left
