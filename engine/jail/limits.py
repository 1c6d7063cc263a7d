"""How much a jailed process may take: memory, processes, file size, its folder's size, its output.

Candidate code (and a compiler fed a candidate) can touch 8 GiB, fork hundreds of processes, write gigabytes
or print without end; nothing of that may reach kbench or the machine. What each layer is, and what a machine
without it still gets:

- memory: a memory cgroup of the step's whole process tree where one can be made (engine/jail/cgroups.py);
  and RLIMIT_AS per process, except where CUDA runs (it reserves the GPU's address range: an address-space
  limit breaks it), so a runner without a cgroup has no memory bound and the report says so;
- processes: a pids cgroup where one can be made; RLIMIT_NPROC where the process is not uid 0 (the kernel
  exempts uid 0 from it, capabilities or not);
- file size: RLIMIT_FSIZE, per file (SIGXFSZ, then EFBIG), always;
- the folder it writes: its total size, watched by the process's supervisor (engine/jail/supervise.py),
  which stops the step beyond it;
- output: stdout and stderr go to a file of a capped size (the start and the end are kept), never into
  kbench's memory;
- open files: RLIMIT_NOFILE; core dumps: none (RLIMIT_CORE 0).

Defaults per kind of step are here; `KBENCH_JAIL_LIMITS` ("memory=2G,processes=64,file=100M,scratch=1G,
output=1M,open_files=256"), read by the trusted side (engine.procs.jail_limits), overrides them for every step.
Standard library only (the jail's rule).
"""

from __future__ import annotations

import os
import re
import resource
from dataclasses import asdict, dataclass, replace
from typing import Any

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class Limits:
    memory: int = 0            # bytes: the cgroup's memory limit, and RLIMIT_AS where `address_space`
    address_space: bool = True  # False for processes that run CUDA
    processes: int = 0         # tasks (threads count) in the pids cgroup; RLIMIT_NPROC where not uid 0
    file: int = 0              # bytes: the largest file it may write (RLIMIT_FSIZE)
    scratch: int = 0           # bytes: the most its write folders may hold together (watched)
    output: int = 0            # bytes of stdout + stderr kept (the first part and the last 64 KiB)
    open_files: int = 0        # RLIMIT_NOFILE

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any] | None) -> "Limits":
        obj = obj or {}
        return cls(**{k: v for k, v in obj.items() if k in cls.__dataclass_fields__})

    def describe(self) -> str:
        """One line: "memory 8.0 GiB, 256 processes, files 1.0 GiB, folder 4.0 GiB, output 4.0 MiB"."""
        parts = [f"memory {size(self.memory)}" if self.memory else "",
                 f"{self.processes} processes" if self.processes else "",
                 f"files {size(self.file)}" if self.file else "", f"folder {size(self.scratch)}" if self.scratch
                 else "", f"output {size(self.output)}" if self.output else ""]
        return ", ".join(p for p in parts if p) or "none"


def size(n: int) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / MiB:.1f} MiB"


def _ram() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 16 * GiB


# A compiler on one candidate: nvcc's cicc and ptxas, g++ on torch's headers (the precompiled header alone maps
# ~0.8 GB) stay well under 4 GiB; the import of a KernelBench candidate loads torch (~3.3 GB of address space)
# and runs load_inline's ninja, nvcc and g++.
COMPILE = Limits(memory=8 * GiB, processes=256, file=1 * GiB, scratch=4 * GiB, output=4 * MiB, open_files=4096)
IMPORT = Limits(memory=12 * GiB, processes=512, file=1 * GiB, scratch=4 * GiB, output=4 * MiB, open_files=4096)


def runner_limits() -> Limits:
    """A runner or profiled child: CUDA (no address-space limit), torch's threads (one per core), up to the
    configs' host memory (the task decides; bounded at 3/4 of the machine's)."""
    return Limits(memory=_ram() * 3 // 4, address_space=False, processes=max(4096, 16 * (os.cpu_count() or 1)),
                  file=8 * GiB, scratch=16 * GiB, output=16 * MiB, open_files=65536)


_UNITS = {"": 1, "k": 1 << 10, "m": MiB, "g": GiB}
_KEYS = {"memory", "processes", "file", "scratch", "output", "open_files"}


def overridden(limits: Limits, text: str) -> Limits:
    """`limits` with `text` applied (KBENCH_JAIL_LIMITS: "memory=2G,processes=64"); an item that does not parse is
    left out (`check_override` says which)."""
    changes: dict[str, int] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, _, value = item.partition("=")
        m = re.fullmatch(r"(\d+)\s*([kKmMgG]?)i?[bB]?", value.strip())
        if key.strip() in _KEYS and m:
            unit = 1 if key.strip() in ("processes", "open_files") else _UNITS[m.group(2).lower()]
            changes[key.strip()] = int(m.group(1)) * unit
    return replace(limits, **changes)


def check_override(text: str) -> str:
    """Why KBENCH_JAIL_LIMITS does not parse ("" where it does)."""
    bad = [item for item in filter(None, (x.strip() for x in text.split(",")))
           if item.partition("=")[0].strip() not in _KEYS
           or not re.fullmatch(r"(\d+)\s*([kKmMgG]?)i?[bB]?", item.partition("=")[2].strip())]
    return f"KBENCH_JAIL_LIMITS: cannot read {', '.join(bad)} (keys: {', '.join(sorted(_KEYS))}; sizes like 2G)" \
        if bad else ""


def set_rlimits(limits: Limits, *, uid: int, pids_cgroup: bool) -> list[str]:
    """Lower this process's resource limits (inherited by everything it starts); what could not be set, as
    "<limit>: <why>" lines (a limit never goes up: an existing lower one stays). `uid`: the identity it runs as
    (uid 0 is exempt from RLIMIT_NPROC); `pids_cgroup`: a pids cgroup bounds its tasks already."""
    missing: list[str] = []

    def lower(which: int, value: int, name: str) -> None:
        try:
            soft, hard = resource.getrlimit(which)
            new = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (new if soft == resource.RLIM_INFINITY else min(new, soft), new))
        except (OSError, ValueError) as exc:
            missing.append(f"{name}: {exc}")

    lower(resource.RLIMIT_CORE, 0, "core dumps")
    if limits.memory and limits.address_space:
        lower(resource.RLIMIT_AS, limits.memory, "address space")
    if limits.file:
        lower(resource.RLIMIT_FSIZE, limits.file, "file size")
    if limits.open_files:
        lower(resource.RLIMIT_NOFILE, limits.open_files, "open files")
    if limits.processes and not pids_cgroup:
        if uid == 0:
            missing.append("processes: no pids cgroup, and uid 0 is exempt from RLIMIT_NPROC")
        else:   # RLIMIT_NPROC counts every task of the uid on the machine: on top of those it has now
            lower(resource.RLIMIT_NPROC, limits.processes + tasks_of(uid), "processes")
    return missing


def tasks_of(uid: int) -> int:
    """How many tasks (threads included) the machine runs as `uid` now."""
    n = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    n += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                continue
    return n
