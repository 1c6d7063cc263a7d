"""The jail that candidate code and compilers run in (INTEGRITY.md, "The jail").

`JailSpec` says what a jailed process may touch; `apply(spec)` puts the calling process in it, layer by layer,
and returns a `JailReport` of what took hold. A layer that cannot be set up on this machine is named in the
report (`missing`), which kbench prints at start and records with every measurement: it never runs a
candidate unjailed in silence. This package imports only the standard library, so a process can jail itself
before importing torch or anything a candidate could have touched.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class JailSpec:
    read_exec: tuple[str, ...] = ()   # code: system directories, Python, CUDA, kbench's engine package
    read: tuple[str, ...] = ()        # data it may read (the candidate's build, /proc/self, /sys...)
    write: tuple[str, ...] = ()       # its scratch folder: every write right
    devices: tuple[str, ...] = ()     # device files opened read-write with ioctls (/dev/nvidia*, /dev/null)
    own_proc_writable: bool = False   # /proc/self writable (CUDA names its threads through .../task/<tid>/comm)
    network_namespace: bool = True
    seccomp: bool = True
    allow_unix_sockets: bool = False
    drop_privileges: bool = True
    die_with_parent: bool = False     # SIGKILL when the parent exits (set after the uid change, which clears it)
    needed_by_nobody: tuple[str, ...] = ()   # paths uid 65534 must read for the uid drop to be safe
    refuse_incomplete: bool = False   # exec.py runs nothing where a layer did not take hold (JailReport.refusal)
    limits: dict[str, Any] = field(default_factory=dict)   # engine.jail.limits.Limits, as JSON ({}: none)
    cgroup: tuple[str, ...] = ()      # the step's cgroup folders to join (made by its trusted parent)

    # Explicit, not engine.jsonable (pydantic): engine/jail/exec.py reads this in `python -I -S`, before the jail
    # is up, with the standard library alone (see the module docstring).
    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "JailSpec":
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in obj.items()})


@dataclass
class JailReport:
    landlock_abi: int = 0
    filesystem: bool = False       # Landlock filesystem rules enforced
    tcp: bool = False              # Landlock denies TCP bind/connect
    scoped: bool = False           # Landlock scopes abstract unix sockets and signals
    network_namespace: str = ""    # "root", "user namespace" or "" (not entered)
    seccomp: str = ""              # "sockets: unix only" / "sockets: none", or "" (not installed)
    identity: str = ""             # "uid 65534", "uid 0 without capabilities (...)", "uid 1000 (not root...)"
    dumpable: bool = True
    missing: list[str] = field(default_factory=list)   # "<layer>: <why>" for each layer that did not take hold
    bounded: list[str] = field(default_factory=list)   # the limits that hold ("memory 8.0 GiB (cgroup)", ...)
    unbounded: list[str] = field(default_factory=list)  # "<limit>: <why>" for each limit this machine lacks

    @property
    def complete(self) -> bool:
        return not self.missing

    def refusal(self, spec: "JailSpec") -> str:
        """Why a jail that `spec` asks to be complete (refuse_incomplete) must not run its program, or ""."""
        if not spec.refuse_incomplete or self.complete:
            return ""
        return "the jail is incomplete (" + "; ".join(self.missing) + ")"

    def summary(self) -> str:
        """One line for logs, the app's banner and measurement notes."""
        parts = []
        if self.filesystem:
            parts.append(f"landlock v{self.landlock_abi} fs" + (" tcp" if self.tcp else "")
                         + (" scope" if self.scoped else ""))
        if self.network_namespace:
            parts.append("netns")
        if self.seccomp:
            parts.append(f"seccomp ({self.seccomp})")
        if self.identity:
            parts.append(self.identity.split(" (")[0])
        text = ", ".join(parts) or "no jail"
        if self.bounded:
            text += "; limits: " + ", ".join(self.bounded)
        if self.missing:
            text += "; MISSING: " + "; ".join(self.missing)
        if self.unbounded:
            text += "; UNBOUNDED: " + "; ".join(self.unbounded)
        return text

    # Explicit: standard library only, as JailSpec's; `summary` is computed, and the reader skips it.
    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary()}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "JailReport":
        known = {k: v for k, v in obj.items() if k in cls.__dataclass_fields__}
        return cls(**known)


REFUSED = "kbench jail:"   # how exec.py's refusal to run a program in an incomplete jail begins (on stderr)
EXEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "exec.py")


def command(cmd: list[str], spec: JailSpec | None, *, log: str = "", report: str = "",
            supervise: bool = True) -> list[str]:
    """`cmd` started by engine/jail/exec.py in `spec` (None: unjailed). `supervise`: under a supervisor that kills
    the step's whole tree when it ends or when kbench goes (engine/jail/supervise.py), its output in the capped
    file `log`, its report in `report`; else the jail is applied and the program exec'd in the same process."""
    if spec is None and not supervise:
        return cmd
    launch = {"jail": spec.to_json() if spec is not None else None, "log": log, "report": report,
              "supervise": supervise}
    return [sys.executable, "-I", "-S", EXEC, json.dumps(launch), "--", *cmd]


def python_path(folder: str) -> str:
    """A folder to use as PYTHONPATH for a jailed Python: `engine` in it links to kbench's engine package, so the
    interpreter finds kbench without being allowed to list the checkout around it."""
    pkg = os.path.join(folder, "pkg")
    os.makedirs(pkg, exist_ok=True)
    link = os.path.join(pkg, "engine")
    if not os.path.lexists(link):
        os.symlink(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), link, target_is_directory=True)
    return pkg


def _join_cgroup(spec: JailSpec, rep: JailReport) -> bool:
    if not spec.cgroup:
        return False
    try:
        for d in spec.cgroup:
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        return True
    except OSError as exc:
        rep.unbounded.append(f"step cgroup: cannot join it ({exc.strerror or exc})")
        return False


def _set_limits(spec: JailSpec, rep: JailReport, joined: bool) -> None:
    # lazy: resource limits are set only in a process that jails itself (the CLI imports engine.jail)
    from engine.jail import limits as lim

    want = lim.Limits.from_json(spec.limits)
    rep.unbounded += lim.set_rlimits(want, uid=os.getuid(), pids_cgroup=joined)
    if want.memory:
        if joined:
            rep.bounded.append(f"memory {lim.size(want.memory)} (cgroup)")
        if want.address_space:
            rep.bounded.append(f"address space {lim.size(want.memory)} per process")
        elif not joined:
            rep.unbounded.append("memory: no cgroup, and CUDA needs an unlimited address space")
    if want.processes and (joined or os.getuid() != 0):
        rep.bounded.append(f"{want.processes} processes" + (" (cgroup)" if joined else " (RLIMIT_NPROC)"))
    for name, value in (("files", want.file), ("folder", want.scratch), ("output", want.output)):
        if value:
            rep.bounded.append(f"{name} {lim.size(value)}")


def apply(spec: JailSpec) -> JailReport:
    """Jail the calling process. Call it while the process has a single thread (before importing torch)."""
    # lazy: the layers load ctypes and libc, needed only in a process that jails itself (the CLI imports engine.jail)
    from engine.jail import landlock, privileges, seccomp

    rep = JailReport()
    joined = _join_cgroup(spec, rep)        # while still root: the group's files are root's
    if spec.network_namespace:
        try:
            rep.network_namespace = privileges.new_network_namespace()
        except OSError as exc:
            rep.missing.append(f"network namespace: {exc.strerror or exc}")
    if spec.drop_privileges:
        try:
            rep.identity = privileges.drop_privileges(list(spec.needed_by_nobody))
        except OSError as exc:
            rep.missing.append(f"privilege drop: {exc.strerror or exc}")
    else:
        rep.identity = f"uid {os.geteuid()} (unchanged)"
    if spec.die_with_parent:
        try:
            privileges.die_with_parent()
        except OSError as exc:     # inside another jail whose seccomp filter keeps the signal it set
            rep.missing.append(f"parent-death signal: {exc.strerror or exc}")
    if spec.limits:
        _set_limits(spec, rep, joined)
    try:
        privileges.set_dumpable(False)
        rep.dumpable = False
    except OSError as exc:
        rep.missing.append(f"non-dumpable: {exc.strerror or exc}")
    rules = ([landlock.PathRule(p, landlock.READ_EXEC) for p in spec.read_exec]
             + [landlock.PathRule(p, landlock.READ) for p in spec.read]
             + [landlock.PathRule(p, landlock.READ_EXEC | landlock.WRITE) for p in spec.write]
             + [landlock.PathRule(p, landlock.READ_FILE | landlock.WRITE_FILE | landlock.IOCTL_DEV)
                for p in spec.devices])
    if spec.own_proc_writable:
        rules.append(landlock.PathRule("/proc/self", landlock.READ | landlock.WRITE_FILE | landlock.TRUNCATE))
    try:
        out = landlock.restrict(rules)
        rep.landlock_abi, rep.filesystem, rep.tcp, rep.scoped = out.abi, out.fs, out.tcp, out.scoped
        if not out.tcp and not rep.network_namespace:
            rep.missing.append(f"TCP rules: Landlock v{out.abi} has none (v4+) and no network namespace")
        if spec.allow_unix_sockets and not out.scoped and not rep.network_namespace:   # abstract sockets: per netns
            rep.missing.append(f"abstract unix socket scope: Landlock v{out.abi} has none (v6+) and no network "
                               "namespace")
    except OSError as exc:
        rep.missing.append(f"landlock: {exc.strerror or exc}")
    if spec.seccomp:
        try:
            s = seccomp.install(allow_unix=spec.allow_unix_sockets)
            rep.seccomp = f"sockets: {s.sockets}"
        except OSError as exc:
            rep.missing.append(f"seccomp: {exc.strerror or exc}")
    return rep
