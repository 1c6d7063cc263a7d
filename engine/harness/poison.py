"""Defences against outputs that 'pass' by reusing memory: poison the caching allocator's free blocks.

A kernel that returns torch::empty(...) without writing every element can pick up the reference's stale
output from a freed block. Filling every inactive cached block with NaN before a candidate runs turns
such reuse into a visible NaN mismatch.
"""

from __future__ import annotations

from typing import Any

import torch


def poison_tensor(t: Any) -> None:
    """Overwrite a tensor's storage with NaN (float) or a sentinel (int) before it is freed."""
    if isinstance(t, torch.Tensor) and t.is_cuda and t.numel():
        with torch.no_grad():
            if t.is_floating_point():
                t.detach().fill_(float("nan"))
            else:
                t.detach().fill_(-1234567)


def poison_outputs(outputs: tuple) -> None:
    for t in outputs:
        poison_tensor(t)


def poison_free_cache(device: Any = None) -> int:
    """Allocate every inactive block of the CUDA caching allocator, fill it with NaN, free it again.

    Returns the number of bytes poisoned. Sizes come from the allocator's own snapshot, so each request
    is served by exactly such a free block.
    """
    if not torch.cuda.is_available():
        return 0
    sizes: list[int] = []
    for segment in torch.cuda.memory_snapshot():
        for block in segment.get("blocks", ()):
            if block.get("state") == "inactive" and block.get("size", 0) >= 512:
                sizes.append(int(block["size"]))
    held = []
    total = 0
    for size in sorted(sizes, reverse=True):
        try:
            buf = torch.empty(size // 4, dtype=torch.float32, device="cuda")
        except RuntimeError:  # out of memory: poison what we could
            break
        buf.fill_(float("nan"))
        held.append(buf)
        total += size
    del held
    torch.cuda.synchronize()
    return total
