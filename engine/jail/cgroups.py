"""A cgroup per jailed step: one memory limit and one task limit for its whole process tree, and a way to find
and kill every process of it, daemons that left its session included.

kbench makes the group beside its own (the cgroup /proc/self/cgroup names), so it needs write access there:
root on most GPU servers and containers, a user with a delegated cgroup v2 subtree elsewhere. cgroup v2 needs
the memory and pids controllers enabled for that subtree (its parent's cgroup.subtree_control); cgroup v1 needs
the memory and pids hierarchies writable. Where neither holds, `StepGroup.create` returns None with the reason,
the jail report says so, and the step still gets its per-process limits (engine/jail/limits.py).
Standard library only (the jail's rule).
"""

from __future__ import annotations

import errno
import itertools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count(1)


def _own_paths() -> dict[str, str]:
    """{controller or "" (v2): this process's cgroup path} from /proc/self/cgroup."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        for c in (controllers.split(",") if controllers else [""]):
            out[c] = path
    return out


def _v2_base(paths: dict[str, str]) -> Path | None:
    """Where a v2 group beside ours goes: our cgroup's folder, where memory and pids are enabled for children."""
    for mount in (ROOT, ROOT / "unified"):
        if (mount / "cgroup.controllers").is_file() and "" in paths:
            base = mount / paths[""].lstrip("/")
            try:
                enabled = (base / "cgroup.subtree_control").read_text().split()
            except OSError:
                continue
            if {"memory", "pids"} <= set(enabled) and os.access(base, os.W_OK):
                return base
    return None


def _v1_bases(paths: dict[str, str]) -> dict[str, Path] | None:
    bases = {}
    for c in ("memory", "pids"):
        if c not in paths:
            return None
        base = ROOT / c / paths[c].lstrip("/")
        if not (base / "cgroup.procs").is_file() or not os.access(base, os.W_OK):
            return None
        bases[c] = base
    return bases


def _write(d: Path, name: str, value: str | None) -> None:
    if value is not None and (d / name).exists():
        (d / name).write_text(value)


def support() -> str:
    """Why no step group can be made here, or "" where one can."""
    paths = _own_paths()
    if _v2_base(paths) is not None or _v1_bases(paths) is not None:
        return ""
    if not paths:
        return "no /proc/self/cgroup"
    return ("no writable cgroup beside kbench's own with the memory and pids controllers "
            f"({', '.join(sorted(k or 'v2' for k in paths))} seen)")


@dataclass
class StepGroup:
    dirs: tuple[Path, ...]     # one (v2) or the memory and pids groups (v1)
    version: int

    @classmethod
    def create(cls, memory: int, processes: int) -> "StepGroup | None":
        """A new group with these limits (0: none), or None where this machine gives kbench no cgroup."""
        paths = _own_paths()
        # a random part too: a group left behind by an earlier process of the same pid (pids are reused; a killed
        # supervisor cannot remove its group) would make mkdir fail, and the step would run without its limits
        name = f"kbench-{os.getpid()}-{next(_counter)}-{os.urandom(4).hex()}"
        try:
            v2 = _v2_base(paths)
            if v2 is not None:
                d = v2 / name
                d.mkdir()
                group = cls((d,), 2)
                _write(d, "memory.max", str(memory) if memory else None)
                _write(d, "memory.swap.max", "0" if memory else None)
                _write(d, "pids.max", str(processes) if processes else None)
                return group
            v1 = _v1_bases(paths)
            if v1 is None:
                return None
            dirs = []
            try:
                for base in v1.values():
                    (base / name).mkdir()
                    dirs.append(base / name)
            except OSError:
                for d in dirs:
                    d.rmdir()
                raise
            group = cls(tuple(dirs), 1)
            mem, pids = dirs
            _write(mem, "memory.limit_in_bytes", str(memory) if memory else None)
            _write(mem, "memory.memsw.limit_in_bytes", str(memory) if memory else None)   # absent: no swap accounting
            _write(pids, "pids.max", str(processes) if processes else None)
            return group
        except OSError:
            return None

    def join(self, pid: int = 0) -> None:
        """Move `pid` (0: the caller) into the group; what it starts afterwards is in it from birth."""
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(pid or os.getpid()))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs:
            try:
                found |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                continue
        return found

    def kill(self, wait_s: float = 5.0) -> bool:
        """SIGKILL every process in the group until none is left (a fork racing the kill is caught on the next
        round; the pids limit bounds the rounds). True when it is empty."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.version == 2 and (self.dirs[0] / "cgroup.kill").exists():
                try:
                    (self.dirs[0] / "cgroup.kill").write_text("1")
                except OSError:
                    pass
            left = self.pids()
            if not left:
                return True
            for p in left:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)
        return not self.pids()

    def memory_peak(self) -> int | None:
        """The group's highest memory use in bytes, where the kernel keeps it."""
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            try:
                return int((self.dirs[0] / name).read_text())
            except (OSError, ValueError):
                continue
        return None

    def remove(self) -> None:
        """Kill what is left and remove the group (a group is removed only once empty: a zombie still counts
        until its parent reaps it, so this retries for a moment)."""
        self.kill()
        for d in self.dirs:
            for _ in range(200):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        break
                    time.sleep(0.01)
