"""Count what a command leaves behind: `python -m tests.reaper GRACE_S -- COMMAND...` becomes a child subreaper,
starts COMMAND, prints its pid (a line `pid N`), waits for it to end however it ends (a test kills it), then waits up
to GRACE_S for every process it left to end (they are re-parented here, wherever they were in the tree: daemons
that called setsid too) and prints a last line `left [...]`, a JSON list of [pid, command line] of those still
alive, which it then kills. Its exit status is the command's (128 + the signal for a killed one)."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def children(pid: int) -> list[int]:
    out = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            out += [int(x) for x in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return out


def descendants() -> list[int]:
    out, todo = [], children(os.getpid())
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children(p)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:300]
    except OSError:
        return "?"


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> int:
    grace = float(argv[0])
    cmd = argv[argv.index("--") + 1:]
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)          # PR_SET_CHILD_SUBREAPER
    # SIGINT at its default in the command, as a terminal gives it: a test run started in the background inherits
    # SIGINT ignored (a non-interactive shell's `&`), and the command would never see the test's Ctrl-C
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    print(f"pid {proc.pid}", flush=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # a test's Ctrl-C is for the command, not for this counter
    rc = proc.wait()
    deadline = time.monotonic() + grace
    while True:
        reap()
        left = [p for p in descendants() if alive(p)]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    print("left " + json.dumps([[p, cmdline(p)] for p in left]), flush=True)
    for p in left:
        try:
            os.killpg(p, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.2)
    reap()
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
