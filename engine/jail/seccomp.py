"""A seccomp-BPF filter written by hand (ctypes, no libseccomp): the system calls a candidate never needs.

Denied with EPERM (EACCES for sockets, so libraries report "permission denied" instead of crashing):
- network sockets: `socket()` for every family but AF_UNIX (or every family, `allow_unix=False`), and with
  AF_UNIX allowed (the CUDA driver creates one) `connect` and `sendto`, so no socket reaches another
  process; together with the network namespace and Landlock's TCP rules no address is reachable;
- reaching into other processes: ptrace, process_vm_readv/writev, pidfd_getfd, kcmp;
- re-arranging its own sandbox or the machine: unshare, setns, mount, umount2, pivot_root, chroot, seccomp
  (and prctl(PR_SET_SECCOMP)), dropping its parent-death signal (prctl(PR_SET_PDEATHSIG)), bpf, perf_event_open, userfaultfd, keyctl, add_key, request_key,
  io_uring_* (its requests bypass seccomp), open_by_handle_at, module loading, kexec, reboot, swap.

The filter is installed with TSYNC, so every thread of the process gets it, and it is inherited across
fork and exec. System calls of another architecture (x32 on x86-64) are refused outright.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import socket
from dataclasses import dataclass

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_PR_SET_PDEATHSIG = 1

# name -> number per architecture; AUDIT_ARCH value; the seccomp and prctl syscall numbers.
_X86_64 = {
    "arch": 0xC000003E, "seccomp": 317, "prctl": 157, "socket": 41,
    "deny": {"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438,
             "kcmp": 312, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
             "chroot": 161, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250,
             "add_key": 248, "request_key": 249, "io_uring_setup": 425, "io_uring_enter": 426,
             "io_uring_register": 427, "open_by_handle_at": 304, "init_module": 175, "finit_module": 313,
             "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320, "reboot": 169, "swapon": 167,
             "swapoff": 168, "seccomp": 317},
    "unix_reach": {"connect": 42}, "sendto": 44,
}
_AARCH64 = {
    "arch": 0xC00000B7, "seccomp": 277, "prctl": 167, "socket": 198,
    "deny": {"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438,
             "kcmp": 272, "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41,
             "chroot": 51, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "keyctl": 219,
             "add_key": 217, "request_key": 218, "io_uring_setup": 425, "io_uring_enter": 426,
             "io_uring_register": 427, "open_by_handle_at": 265, "init_module": 105, "finit_module": 273,
             "delete_module": 106, "kexec_load": 104, "kexec_file_load": 294, "reboot": 142, "swapon": 224,
             "swapoff": 225, "seccomp": 277},
    "unix_reach": {"connect": 203}, "sendto": 206,
}
_TABLES = {"x86_64": _X86_64, "amd64": _X86_64, "aarch64": _AARCH64, "arm64": _AARCH64}


class SeccompError(OSError):
    pass


@dataclass(frozen=True)
class Outcome:
    denied: tuple[str, ...]
    sockets: str          # "unix only" or "none"


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def table() -> dict | None:
    return _TABLES.get(platform.machine().lower())


def _program(tab: dict, allow_unix: bool) -> list[tuple[int, int, int, int]]:
    """The BPF program as (code, jt, jf, k) tuples. Jumps are relative to the next instruction."""
    eperm, eacces = _RET_ERRNO | errno.EPERM, _RET_ERRNO | errno.EACCES
    deny = dict(tab["deny"])
    if allow_unix:  # a unix socket may exist (the CUDA driver makes one) but never reach another process
        deny.update(tab["unix_reach"])
    prog: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, 4),                     # arch
        (_JEQ_K, 1, 0, tab["arch"]),
        (_RET_K, 0, 0, _RET_KILL_PROCESS),        # another ABI (x32, ia32): refuse outright
        (_LD_W_ABS, 0, 0, 0),                     # nr
    ]
    if tab is _X86_64:
        prog += [(_JGE_K, 0, 1, 0x40000000), (_RET_K, 0, 0, eperm)]   # x32 system calls
    for nr in sorted(set(deny.values())):
        prog += [(_JEQ_K, 0, 1, nr), (_RET_K, 0, 0, eperm)]
    # prctl(PR_SET_SECCOMP): another filter could trap and rewrite the harness's own writes;
    # prctl(PR_SET_PDEATHSIG): the jailed process dies with its parent and must not undo that.
    prog += [(_JEQ_K, 0, 4, tab["prctl"]), (_LD_W_ABS, 0, 0, 16), (_JEQ_K, 1, 0, _PR_SET_SECCOMP),
             (_JEQ_K, 0, 1, _PR_SET_PDEATHSIG), (_RET_K, 0, 0, eperm), (_LD_W_ABS, 0, 0, 0)]
    if allow_unix:
        # sendto with a destination address reaches a socket by name; send() (sendto with none) is fine
        prog += [(_JEQ_K, 0, 6, tab["sendto"]), (_LD_W_ABS, 0, 0, 48), (_JEQ_K, 0, 2, 0), (_LD_W_ABS, 0, 0, 52),
                 (_JEQ_K, 1, 0, 0), (_RET_K, 0, 0, eperm), (_RET_K, 0, 0, _RET_ALLOW)]
        prog += [(_JEQ_K, 0, 3, tab["socket"]), (_LD_W_ABS, 0, 0, 16), (_JEQ_K, 1, 0, socket.AF_UNIX),
                 (_RET_K, 0, 0, eacces)]
    else:
        prog += [(_JEQ_K, 0, 1, tab["socket"]), (_RET_K, 0, 0, eacces)]
    prog.append((_RET_K, 0, 0, _RET_ALLOW))
    return prog


def install(allow_unix: bool = True) -> Outcome:
    """Install the filter on every thread of this process (no_new_privs is set first, as seccomp requires)."""
    tab = table()
    if tab is None:
        raise SeccompError(errno.ENOSYS, f"no system call table for {platform.machine()}")
    prog = _program(tab, allow_unix)
    filters = (_Filter * len(prog))(*[_Filter(*ins) for ins in prog])
    fprog = _Prog(len(prog), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise SeccompError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
    rc = libc.syscall(ctypes.c_long(tab["seccomp"]), ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
                      ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))
    if rc != 0:
        err = ctypes.get_errno()
        raise SeccompError(err, f"seccomp(SET_MODE_FILTER): {os.strerror(err) if rc < 0 else f'thread {rc}'}")
    denied = sorted({**tab["deny"], **(tab["unix_reach"] if allow_unix else {})}) + \
        (["sendto(to an address)"] if allow_unix else [])
    return Outcome(tuple(denied) + ("prctl(PR_SET_SECCOMP)", "prctl(PR_SET_PDEATHSIG)"),
                   "unix, never connected" if allow_unix else "none")

