"""The supervisor of one step: the trusted parent between kbench and a process it starts (a compiler, the
KernelBench import child, the profile child, a judge), so that no process of the step outlives it.

`python -I -S engine/jail/exec.py LAUNCH_JSON -- PROGRAM ARGS...` runs `supervise()`: it becomes a child
subreaper (orphans of the step's tree, daemons that called setsid included, are re-parented to it), makes the
step's cgroup where the machine allows (engine/jail/cgroups.py), forks the program's process, which jails itself
(engine.jail.apply: identity, Landlock, seccomp, limits) and execs; the supervisor copies the step's stdout and
stderr into a capped log file, watches the size of the folders the step may write, and when the program exits
(or the step is stopped: SIGTERM, or its parent dying, which sends it SIGTERM) kills everything left of the tree
and the group, reaps it, writes a report (the jail, what was bounded, why the step was stopped) and exits with
the program's status. Standard library only (the jail's rule).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

TAIL = 64 * 1024          # the end of a step's output is kept whatever the cap (crash tails are there)
WATCH_S = 0.25            # how often the step's folders are measured
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 1, 4, 36


class CappedLog:
    """Bytes from a descriptor into a file: the first `cap` bytes and the last TAIL, the middle only counted."""

    def __init__(self, path: str, cap: int):
        self.path, self.cap = path, cap
        self.written = 0
        self.dropped = 0
        self._tail = bytearray()
        self._f = open(path, "wb")

    def pump(self, fd: int) -> None:
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except InterruptedError:
                continue
            except OSError:
                break
            if not chunk:
                break
            room = max(self.cap - self.written, 0) if self.cap else len(chunk)
            if room:
                self._f.write(chunk[:room])
                self._f.flush()
                self.written += min(room, len(chunk))
            rest = chunk[room:]
            if rest:
                self.dropped += len(rest)
                self._tail += rest
                del self._tail[:-TAIL]
        os.close(fd)

    def close(self) -> None:
        if self.dropped:
            kept = bytes(self._tail)
            skipped = self.dropped - len(kept)
            self._f.write(f"\n[kbench: {skipped} bytes of output not kept (over {self.cap} bytes); "
                          f"the last {len(kept)} follow]\n".encode())
            self._f.write(kept)
        self._f.close()


def folder_bytes(paths: list[str]) -> int:
    """The disk space the files under `paths` take (allocated blocks), links not followed."""
    total, todo = 0, list(paths)
    while todo:
        try:
            with os.scandir(todo.pop()) as it:
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if e.is_dir(follow_symlinks=False):
                        todo.append(e.path)
        except OSError:
            continue
    return total


def reap_finished() -> bool:
    """Reap every child of this process that has ended, without waiting; whether any child is left."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def children_of(pid: int) -> list[int]:
    """Direct children of `pid` (every thread's list)."""
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                out += [int(x) for x in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
            except (OSError, ValueError):
                continue
    except OSError:
        pass
    return out


def descendants(pid: int) -> list[int]:
    out, todo = [], children_of(pid)
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children_of(p)
    return out


class Supervisor:
    def __init__(self, spec: Any, cmd: list[str], log: str, report: str):
        from engine.jail import cgroups, limits   # lazy: exec.py puts kbench on sys.path first

        self.spec, self.cmd, self.report_path = spec, cmd, report
        self.limits = limits.Limits.from_json(spec.limits) if spec is not None else limits.Limits()
        self.log = CappedLog(log, self.limits.output) if log else None
        self.group = None
        self.group_missing = ""
        if spec is not None and (self.limits.memory or self.limits.processes):
            self.group = cgroups.StepGroup.create(self.limits.memory, self.limits.processes)
            self.group_missing = "" if self.group is not None else cgroups.support() or "cgroup creation failed"
        self.stopped = ""            # why the supervisor ended the step ("" where the program ended by itself)
        self.jail: dict[str, Any] = {}
        self.child = 0
        self._lock = threading.Lock()
        self._done = False

    # -- the program's process --------------------------------------------------------------------------------
    def _start(self) -> tuple[int | None, int]:
        out_r, out_w = os.pipe() if self.log else (None, None)
        rep_r, rep_w = os.pipe()
        spec = self.spec
        if spec is not None and self.group is not None:
            spec = replace(spec, cgroup=tuple(str(d) for d in self.group.dirs))
        pid = os.fork()
        if pid == 0:   # the program's process: jail, then exec
            try:
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    signal.signal(sig, signal.SIG_DFL)
                os.close(rep_r)
                if out_w is not None:
                    os.close(out_r)
                    os.dup2(out_w, 1)
                    os.dup2(out_w, 2)
                    os.close(out_w)
                code = jail_and_exec(spec, self.cmd, rep_w, self.group_missing)
            except BaseException as exc:  # noqa: BLE001 - whatever happens here, the child must not return
                os.write(2, f"kbench jail: {exc}\n".encode(errors="replace"))
                code = 126
            os._exit(code)
        os.close(rep_w)
        if out_w is not None:
            os.close(out_w)
        self.child = pid
        return out_r, rep_r

    # -- ending the step ----------------------------------------------------------------------------------------
    def kill_tree(self) -> None:
        """SIGKILL the program and every process of the step (its tree, adopted orphans, the cgroup), then reap
        them: nothing of the step is left."""
        for _ in range(100):
            left = descendants(os.getpid())
            if self.group is not None:
                left += [p for p in self.group.pids() if p not in left]
            if not left:
                break
            for p in left:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            self._reap(block_s=0.02)
        self._reap()

    def _reap(self, block_s: float = 0.0) -> None:
        deadline = time.monotonic() + block_s
        while reap_finished() and time.monotonic() < deadline:
            time.sleep(0.002)

    def _stop(self, why: str) -> None:
        with self._lock:
            if not self.stopped:
                self.stopped = why
        try:
            os.kill(self.child, signal.SIGKILL)
        except OSError:
            pass

    def _watch(self) -> None:
        folders = list(self.spec.write) if self.spec is not None else []
        while not self._done and folders and self.limits.scratch:
            if folder_bytes(folders) > self.limits.scratch:
                self._stop(f"its folder grew past {self.limits.scratch} bytes (the scratch quota)")
                return
            time.sleep(WATCH_S)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._stop(f"stopped by kbench ({signal.Signals(signum).name})")

    def run(self) -> int:
        from engine.jail import privileges   # lazy: exec.py puts kbench on sys.path first

        parent = os.getppid()
        for option, arg in ((_PR_SET_DUMPABLE, 0),                  # its memory closed to the step's processes
                            (_PR_SET_CHILD_SUBREAPER, 1),           # the step's orphans come here
                            (_PR_SET_PDEATHSIG, int(signal.SIGTERM))):   # kbench gone: end the step
            try:
                privileges.prctl(option, arg)
            except OSError:   # inside another jail (a nested launcher) whose seccomp filter keeps it as it is
                pass
        if os.getppid() != parent:
            return 1
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        out_r, rep_r = self._start()
        pump = threading.Thread(target=self.log.pump, args=(out_r,), daemon=True) if self.log else None
        if pump is not None:
            pump.start()
        threading.Thread(target=self._watch, daemon=True).start()
        raw = b""
        while chunk := _read(rep_r):
            raw += chunk
        os.close(rep_r)
        try:
            self.jail = json.loads(raw) if raw else {}
        except ValueError:
            self.jail = {}
        status = _wait(self.child)
        self._done = True
        self.kill_tree()
        if pump is not None:
            pump.join(5)
            self.log.close()
        peak = self.group.memory_peak() if self.group is not None else None
        if self.group is not None:
            self.group.remove()
        self._write_report(status, peak)
        if os.WIFSIGNALED(status):
            return 128 + os.WTERMSIG(status)
        return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1

    def _write_report(self, status: int, peak: int | None) -> None:
        if not self.report_path:
            return
        report = {"jail": self.jail, "stopped": self.stopped, "limits": self.limits.to_json(),
                  "cgroup": "" if self.group is None else f"cgroup v{self.group.version}",
                  "no_cgroup": self.group_missing, "memory_peak": peak,
                  "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                  "output_dropped": self.log.dropped if self.log else 0}
        Path(self.report_path).write_text(json.dumps(report))


def _read(fd: int) -> bytes:
    while True:
        try:
            return os.read(fd, 1 << 16)
        except InterruptedError:
            continue
        except OSError:
            return b""


def _wait(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return 0


def jail_and_exec(spec: Any, cmd: list[str], report_fd: int | None = None, no_cgroup: str = "") -> int:
    """Apply the jail to this process (`spec`; None: none), send its report down `report_fd` (the supervisor's),
    exec `cmd`. Returns a status only where it could not exec (126); a complete jail that a layer is missing from
    (refuse_incomplete) runs nothing."""
    from engine.jail import REFUSED, apply   # lazy: exec.py puts kbench on sys.path first

    rep = apply(spec) if spec is not None else None
    if rep is not None and no_cgroup and spec.limits:
        rep.unbounded.insert(0, f"step cgroup: {no_cgroup}")
    if report_fd is not None:
        os.write(report_fd, json.dumps(rep.to_json() if rep is not None else {}).encode())
        os.close(report_fd)
    refusal = rep.refusal(spec) if rep is not None else ""
    if refusal:
        sys.stderr.write(f"{REFUSED} {cmd[0]} not run: {refusal}\n")
        return 126
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        sys.stderr.write(f"cannot run {cmd[0]}: {exc}\n")
    return 126
