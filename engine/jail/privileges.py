"""Process-level layers of the jail: a private network namespace, fewer privileges, no core dumps.

- `new_network_namespace()`: a namespace with only a loopback interface that is down, so no address is
  reachable (abstract unix sockets are per namespace too). Root unshares directly; an ordinary user through a
  user namespace that maps its own uid to itself.
- `drop_privileges()`: as root, become uid/gid 65534 where the Python environment is readable by it;
  otherwise stay uid 0 but without any capability (bounding set emptied, NOROOT securebits locked, so no
  executed program gets them back). Either way the process cannot ptrace or read another root process's
  memory or environment, and cannot read files Landlock does not grant.
- `set_dumpable(False)`: /proc/<pid>/mem, environ and ptrace of this process are closed to same-uid
  processes without CAP_SYS_PTRACE. kbench's own processes that hold an API key do this too.
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import stat
import sys
from pathlib import Path

NOBODY = 65534

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_SECUREBITS = 28
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
# SECBIT_NOROOT | _LOCKED, SECBIT_NO_SETUID_FIXUP | _LOCKED, SECBIT_KEEP_CAPS_LOCKED, SECBIT_NO_CAP_AMBIENT_RAISE | _LOCKED
_SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
_CAPSET = {"x86_64": 126, "amd64": 126, "aarch64": 91, "arm64": 91}
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _err(what: str) -> OSError:
    e = ctypes.get_errno()
    return OSError(e, f"{what}: {os.strerror(e)}")


def prctl(option: int, arg: int) -> None:
    """prctl(option, arg, 0, 0, 0); OSError where the kernel refuses."""
    if _libc.prctl(option, arg, 0, 0, 0) != 0:
        raise _err(f"prctl({option})")


def set_dumpable(on: bool) -> None:
    if _libc.prctl(_PR_SET_DUMPABLE, 1 if on else 0, 0, 0, 0) != 0:
        raise _err("prctl(PR_SET_DUMPABLE)")


def die_with_parent() -> None:
    """SIGKILL this process when its parent exits; exit now if the parent is already gone (init adopted us)."""
    parent = os.getppid()
    if _libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
        raise _err("prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent or parent == 1:
        os._exit(1)


def exit_without_teardown(code: int) -> None:
    """End a kbench child process (judge, runner) once its work is written: flush Python's and C stdio's buffers
    (a kernel's printf tail belongs in the log too), then exit without tearing down torch and the CUDA context
    in Python (about a second that its parent would wait for; the kernel releases everything at exit)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        _libc.fflush(None)
    except (OSError, AttributeError):
        pass
    os._exit(code)


def is_dumpable() -> bool:
    return _libc.prctl(3, 0, 0, 0, 0) == 1  # PR_GET_DUMPABLE


def new_network_namespace() -> str:
    """Enter a fresh network namespace; returns how ("root" or "user namespace"). Raises OSError."""
    if os.geteuid() == 0:
        if _libc.unshare(_CLONE_NEWNET) != 0:
            raise _err("unshare(CLONE_NEWNET)")
        return "root"
    uid, gid = os.geteuid(), os.getegid()
    if _libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        raise _err("unshare(CLONE_NEWUSER|CLONE_NEWNET)")
    # Map our own ids to themselves, so files keep their owner and nothing else changes.
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    return "user namespace"


def reachable_by_nobody(path: str) -> bool:
    """Can uid 65534 walk to `path` (search permission on every folder above it)?"""
    try:
        for q in Path(path).parents:
            st = q.stat()
            if st.st_uid != NOBODY and not st.st_mode & stat.S_IXOTH:
                return False
        return True
    except OSError:
        return False


def readable_by_nobody(path: str) -> bool:
    """Can uid/gid 65534 (in no supplementary group) read `path` and walk to it? Judged from mode bits."""
    p = Path(path)
    try:
        chain = [p, *p.parents]
        for i, q in enumerate(chain):
            st = q.stat()
            if st.st_uid == NOBODY:
                continue
            need = (stat.S_IXOTH | (stat.S_IROTH if i == 0 else 0)) if stat.S_ISDIR(st.st_mode) else stat.S_IROTH
            if st.st_mode & need != need:
                return False
        return True
    except OSError:
        return False


def _cap_last() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 40


def drop_capabilities() -> None:
    """Stay uid 0 but hold no capability now or after any exec."""
    if _libc.prctl(_PR_SET_SECUREBITS, _SECUREBITS, 0, 0, 0) != 0:
        raise _err("prctl(PR_SET_SECUREBITS)")
    for cap in range(_cap_last() + 1):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise _err(f"prctl(PR_CAPBSET_DROP, {cap})")
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    nr = _CAPSET.get(platform.machine().lower())
    if nr is None:
        raise OSError(38, f"capset: unknown architecture {platform.machine()}")
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable} words, all zero
    if _libc.syscall(ctypes.c_long(nr), header, data) != 0:
        raise _err("capset")


def drop_privileges(needed_paths: list[str]) -> str:
    """As root: to uid 65534 if it can read every path in `needed_paths`, else to uid 0 without capabilities.
    Returns a one-line description; does nothing (and says so) for an ordinary user."""
    if os.geteuid() != 0:
        return f"uid {os.geteuid()} (not root: unchanged)"
    blocked = [p for p in needed_paths if os.path.exists(p) and not readable_by_nobody(p)]
    if not blocked:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        return f"uid {NOBODY}"
    drop_capabilities()
    return f"uid 0 without capabilities ({blocked[0]} is not readable by uid {NOBODY})"


def capabilities_effective() -> int:
    """The effective capability mask of this process (from /proc/self/status), for tests and reports."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return -1
