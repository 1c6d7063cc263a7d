"""How often mnist_conv_relu_pool's backward baseline disagrees with the fp32 reference, and why: decision flips.

    python scripts/conv_pool_flips.py [--calls 400]

The backward recomputes z = conv(x) + bias to find each 2x2 window's maximum and whether it passes the ReLU. Where
two of a window's values (or its maximum and zero) lie within fp32's rounding of each other, the kernel and cuDNN
may decide differently; either decision is right to fp32's accuracy. A flip moves one of Co rows of grad_weight
(Ci*K*K elements) by up to a few units, so task.toml's `max_mismatch_fraction` for backward must cover it on the
configs with the fewest grad_weight elements per row (robust-kbench's Ci = 1, Co = 32: 288 elements, 3.1 % a flip).

For two of robust-kbench's shapes, each call draws fresh values as the judge does (every element times 1 +- 1/2)
and prints, over the calls: how many elements of (grad_x, grad_weight, grad_bias) miss the task's tolerance
(atol 1e-2, rtol 1e-4) against the fp32 reference, how many of the fp32 reference's own decisions differ from
float64's, and the worst grad_weight error. Needs a GPU; builds the baseline with torch's JIT (about a minute).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tasks" / "mnist_conv_relu_pool" / "baselines" / "backward"
ATOL, RTOL = 1e-2, 1e-4
SHAPES = ((64, 1, 13, 32), (64, 1, 28, 64))  # (batch, in_channels, height = width, out_channels): rkb-multi-2, -4


def _reference(F, x, w, b, gy, dtype):
    x, w, b = (t.detach().to(dtype).requires_grad_() for t in (x, w, b))
    F.max_pool2d(F.relu(F.conv2d(x, w, bias=b)), 2).backward(gy.to(dtype))
    return x.grad, w.grad, b.grad


def _decisions(F, x, w, b):
    """Each window's chosen position, zeroed where the ReLU stops it."""
    z = F.relu(F.conv2d(x, w, bias=b))
    z = z[:, :, : z.shape[2] // 2 * 2, : z.shape[3] // 2 * 2]
    pooled, where = F.max_pool2d(z, 2, return_indices=True)
    return where * (pooled > 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=400, help="fresh calls per shape")
    args = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("conv_pool_flips: no CUDA GPU is visible: nothing to measure", file=sys.stderr)
        return 3
    from torch.utils.cpp_extension import load

    torch.backends.cudnn.allow_tf32 = False   # the judge's setting for its references
    torch.backends.cuda.matmul.allow_tf32 = False
    ext = load("conv_pool_flips_bwd", [str(BASELINE / "kernel.cu"), str(BASELINE / "binding.cpp")],
               extra_cuda_cflags=["-O3"])
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for batch, ci, hw, co in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(12)
        x0 = torch.randn(batch, ci, hw, hw, device="cuda", generator=gen)
        w0 = torch.randn(co, ci, 3, 3, device="cuda", generator=gen) * (2 / (ci * 9)) ** 0.5
        b0 = torch.randn(co, device="cuda", generator=gen) * 0.1
        gy0 = torch.randn(batch, co, (hw - 2) // 2, (hw - 2) // 2, device="cuda", generator=gen)

        def fresh(t, gen=gen):
            return t * (1 + 0.5 * (2 * torch.rand(t.shape, device="cuda", generator=gen) - 1))

        misses: collections.Counter = collections.Counter()
        flips: collections.Counter = collections.Counter()
        worst = 0.0
        for _ in range(args.calls):
            x, w, b, gy = fresh(x0), fresh(w0), fresh(b0), fresh(gy0)
            got = ext.backward(x, w, b, gy)
            ref = _reference(F, x, w, b, gy, torch.float32)
            misses[tuple(int(((g - r).abs() > ATOL + RTOL * r.abs()).sum()) for g, r in zip(got, ref))] += 1
            flips[int((_decisions(F, x, w, b) != _decisions(F, x.double(), w.double(), b.double())).sum())] += 1
            worst = max(worst, float((got[1] - ref[1]).abs().max()))
        print(f"batch {batch}, Ci {ci}, {hw}x{hw}, Co {co}: {args.calls} calls, grad_weight {co * ci * 9} elements")
        print("  elements missing the tolerance (grad_x, grad_weight, grad_bias): calls", dict(sorted(misses.items())))
        print("  the fp32 reference's decisions that differ from float64's, per call: calls", dict(sorted(flips.items())))
        print(f"  worst grad_weight error: {worst:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
