"""The shared-memory arena: bulk tensor bytes between the judge and its runner without a pipe or a socket.

A sealed memfd the judge creates and the runner inherits (its fourth descriptor). The first page is the
mailbox's control word, the rest one slot for bytes:
- outputs (runner -> judge): the timing helper copies an output into the slot, then sends its signed OUTPUT
  record through the record pipe with `"arena": 1` instead of the bytes; the judge copies the slot to the GPU
  and bumps the control word (`released`, the count of slot payloads it has taken). The helper writes the next
  payload only once `released` has caught up with what it sent.
- inputs (judge -> runner): between jobs (the slot is free), the judge writes a config's argument tensors into
  the slot and the `config` message names their offsets instead of carrying their bytes.

Why it is safe to share: the judge trusts nothing in the slot. What it reads there is copied to the GPU first,
then checked against the fingerprint the helper signed (a runner that changes the slot mid-copy, or lies in the
control word, only voids its own outputs as a forgery); offsets and lengths come from signed records and are
bounded by the slot; the memfd is sealed against shrinking, so no read can fault (SIGBUS) in the judge. The
runner gets nothing through it it could not already see: its own arguments and its own outputs.

Why not CUDA IPC: the runner would map the judge's allocations (or the judge the runner's, whose size the runner
declares), and with a jailed user and namespaces the legacy IPC handles are not reliably usable. A pinned host
slot costs one copy each way at PCIe speed; the pipe it replaces cost four (pageable copies, the pipe, a
bytearray) and page faults, about 1.3 s per GiB.

On both sides the slot is page-locked (cudaHostRegister) as far as it has been used (a spare judge locks all of it
before its request), so copies run at full speed; a registration that fails leaves plain shared memory, which
still works.

Lazy imports: torch, in the methods that copy. The runner imports this module (for its layout constants) before
it jails itself, and torch must load only after the jail (engine/pipeline/runner/main.py).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import time
from typing import Any

PAGE = 4096
DATA_OFFSET = PAGE                 # the slot starts after the control page
CONTROL = struct.Struct("<Q")      # u64 `released`: slot payloads the judge has taken
# the memfd: its slot holds the largest output or config arguments that go through it (larger ones take the
# pipe or the socket); sparse, so only what is used takes memory. 8 GiB: KernelBench level 1's elementwise
# problems have 6.4 GiB inputs and outputs, which otherwise cross the socket and the record pipe (minutes).
DEFAULT_BYTES = (8 << 30) + DATA_OFFSET
REGISTER_STEP = 256 << 20          # page-lock in steps, as far as payloads reach
# A spare judge page-locks the first PIN_UP_FRONT of its slot before its request (both sides map the same pages),
# so no ordinary config's arguments or outputs wait for a registration; a larger payload extends it once. Locked
# memory cannot be swapped, and a spare and the evaluation it follows each hold a slot per GPU: hence a slot of
# at most a sixteenth of the memory (arena_bytes).
PIN_UP_FRONT = 4 << 30


def arena_bytes() -> int:
    """The memfd's size: DEFAULT_BYTES, or a sixteenth of the memory this process may use where that is less
    (the machine's, or its cgroup's limit): two slots per GPU are page-locked at a time."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 0
    limit = _cgroup_limit()
    if limit and (not total or limit < total):
        total = limit
    size = min(DEFAULT_BYTES, total // 16) if total else DEFAULT_BYTES
    return max(size - size % PAGE, 2 * PAGE)


def _cgroup_limit() -> int:
    """This process's cgroup v2 memory limit in bytes (0: none, or not readable)."""
    try:
        line = next(ln for ln in open("/proc/self/cgroup").read().splitlines() if ln.startswith("0::"))
        text = open(f"/sys/fs/cgroup{line[3:]}/memory.max").read().strip()
    except (OSError, StopIteration):
        return 0
    return int(text) if text.isdigit() else 0


class Arena:
    """The judge's end: it creates, seals and maps the memfd, takes output payloads and places inputs."""

    def __init__(self, size: int | None = None):
        size = size or arena_bytes()
        self.fd = os.memfd_create("kbench-arena", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, size)
        # sealed before the runner sees it: it cannot shrink the file under the judge's mapping (a read past
        # the end would be a SIGBUS in the judge) nor grow it to eat memory
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.size = size
        self.capacity = size - DATA_OFFSET
        self.mm = mmap.mmap(self.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.released = 0
        self._view: Any = None        # a uint8 CPU tensor over the slot (torch is imported late)
        self._registered = 0          # bytes of the slot page-locked so far
        self.pinned = True            # False once a registration failed: plain shared memory from then on
        # the compiled timing helper's host_register/host_unregister (set once the judge has loaded it): they
        # clear a refused registration's error, which torch's cudart binding would leave for the next launch
        self.pinner: Any = None
        self.seconds = {"out": 0.0, "in": 0.0}
        self.closed = False

    # -- both directions -----------------------------------------------------------------------------------
    def slot(self, nbytes: int) -> Any:
        """The first `nbytes` of the slot as a uint8 CPU tensor, page-locked where possible."""
        import torch
        if self.closed:
            raise ValueError("the arena is closed")
        if self._view is None:
            self._view = torch.frombuffer(self.mm, dtype=torch.uint8, offset=DATA_OFFSET, count=self.capacity)
        if self.pinned and nbytes > self._registered:
            self._register(nbytes)
        return self._view[:nbytes]

    def _register(self, nbytes: int) -> None:
        if self.pinner is None:   # no helper loaded (no GPU): plain shared memory
            return
        want = min(self.capacity, -(-nbytes // REGISTER_STEP) * REGISTER_STEP)
        ptr = self._view.data_ptr()
        if self._registered:
            self.pinner.host_unregister(ptr)
            self._registered = 0
        if not self.pinner.host_register(ptr, want):   # refused: plain shared memory from now on
            self.pinned = False
            return
        self._registered = want

    # -- outputs ----------------------------------------------------------------------------------------------
    def take(self, nbytes: int, device: str = "cuda") -> Any:
        """The payload in the slot, copied to `device` (uint8), then released to the helper for the next one."""
        import torch
        if not 0 <= nbytes <= self.capacity:
            raise ValueError(f"an arena payload of {nbytes} bytes in a slot of {self.capacity}")
        t = time.monotonic()
        out = torch.empty(nbytes, dtype=torch.uint8, device=device)
        if nbytes:
            out.copy_(self.slot(nbytes))
            if out.is_cuda:
                torch.cuda.current_stream().synchronize()
        self.released += 1
        CONTROL.pack_into(self.mm, 0, self.released)
        self.seconds["out"] += time.monotonic() - t
        return out

    # -- inputs -----------------------------------------------------------------------------------------------
    def place(self, tensors: list[Any]) -> list[int | None] | None:
        """Copy tensors into the slot back to back (64-byte aligned), in order, each that still fits: their offsets
        (None for a tensor that did not fit: it goes through the control socket), or None when none fits. A
        config larger than the slot still sends most of its bytes this way (a socket moves about 1 GiB in 3 s)."""
        import torch
        offsets: list[int | None] = []
        end = 0
        for t in tensors:
            n = -(-(t.numel() * t.element_size()) // 64) * 64
            offsets.append(end if end + n <= self.capacity else None)
            end += n if offsets[-1] is not None else 0
        if all(off is None for off in offsets):
            return None
        t0 = time.monotonic()
        slot = self.slot(end)
        for t, off in zip(tensors, offsets):
            n = t.numel() * t.element_size()
            if n and off is not None:
                slot[off:off + n].copy_(t.detach().contiguous().reshape(-1).view(torch.uint8))
        if any(t.is_cuda for t, off in zip(tensors, offsets) if off is not None):
            torch.cuda.synchronize()
        self.seconds["in"] += time.monotonic() - t0
        return offsets

    def close(self) -> None:
        """Unmap. Only from the thread that takes and places (the judge's main thread, after its runner is
        gone): a tensor over the slot does not keep the mapping alive, so nothing may copy from it afterwards."""
        if self.closed:
            return
        self.closed = True
        if self._registered and self._view is not None:
            self.pinner.host_unregister(self._view.data_ptr())
            self._registered = 0
        self._view = None
        self.mm.close()
        os.close(self.fd)
