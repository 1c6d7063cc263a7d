"""Landlock through its three system calls (ctypes, no dependency): filesystem, TCP and scope rules.

Landlock is an unprivileged, stackable Linux security module: a process builds a ruleset ("these paths with
these rights; no TCP bind or connect; no abstract unix sockets or signals outside my domain") and restricts
itself; the restriction is inherited by every thread it creates and every program it executes and can never
be lifted. A right the ruleset does not *handle* stays allowed, so the ruleset handles every right the
running kernel knows (its ABI version) and grants them back per path.

Restriction is per thread: `restrict_self` must run before the process starts any thread (torch and CUDA
start several), so the runner applies it first thing.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

# System call numbers: the same on every architecture (they postdate the unified table).
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2

# Filesystem rights (include/uapi/linux/landlock.h), with the ABI that introduced them.
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13        # ABI 2
TRUNCATE = 1 << 14     # ABI 3
IOCTL_DEV = 1 << 15    # ABI 5

_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
# Rights that make sense on a file (the rest apply to directories only; the kernel rejects them on files).
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

READ = READ_FILE | READ_DIR
READ_EXEC = READ | EXECUTE
WRITE = (WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO | MAKE_SYM
         | REFER | TRUNCATE)

NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1     # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6


class LandlockError(OSError):
    pass


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int


def abi_version() -> int:
    """The running kernel's Landlock ABI, 0 where Landlock is absent or disabled."""
    rc = _libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                       ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(rc), 0)


def handled_fs(abi: int) -> int:
    return _FS_BY_ABI.get(abi, (1 << 16) - 1) if abi > 0 else 0


@dataclass(frozen=True)
class PathRule:
    path: str
    access: int        # rights granted beneath this path (file rights only, if it is a file)


@dataclass(frozen=True)
class Outcome:
    abi: int
    fs: bool           # filesystem rules enforced
    tcp: bool          # TCP bind/connect denied
    scoped: bool       # abstract unix sockets and signals confined to the domain
    skipped: tuple[str, ...]  # paths that did not exist (so nothing was granted there)


def restrict(rules: list[PathRule], *, deny_tcp: bool = True, scope: bool = True) -> Outcome:
    """Build the ruleset, set no_new_privs, restrict this thread (and its future children). Raises LandlockError
    where the kernel has no Landlock, so a caller can say so instead of running unjailed in silence."""
    abi = abi_version()
    if abi <= 0:
        raise LandlockError(ctypes.get_errno() or 38, "Landlock is not available on this kernel")
    fs_all = handled_fs(abi)
    attr = _RulesetAttr(fs_all, (NET_BIND_TCP | NET_CONNECT_TCP) if deny_tcp and abi >= 4 else 0,
                        (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if scope and abi >= 6 else 0)
    size = 8 if abi < 4 else (16 if abi < 6 else 24)   # older kernels reject a larger struct
    ruleset = _libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size),
                            ctypes.c_uint32(0))
    if ruleset < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    skipped: list[str] = []
    try:
        for rule in rules:
            try:
                fd = os.open(rule.path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                skipped.append(rule.path)
                continue
            try:
                access = rule.access & fs_all
                if not Path(rule.path).is_dir():
                    access &= FILE_RIGHTS
                if not access:
                    continue
                beneath = _PathBeneathAttr(access, fd)
                rc = _libc.syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(ruleset),
                                   ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(beneath), ctypes.c_uint32(0))
                if rc < 0:
                    err = ctypes.get_errno()
                    raise LandlockError(err, f"landlock_add_rule {rule.path}: {os.strerror(err)}")
            finally:
                os.close(fd)
        if _libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: required to restrict without privileges
            err = ctypes.get_errno()
            raise LandlockError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
        if _libc.syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(ruleset)
    return Outcome(abi, True, bool(attr.handled_access_net), bool(attr.scoped), tuple(skipped))
