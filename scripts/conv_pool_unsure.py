"""How many of mnist_conv_relu_pool's pool windows the exact-decision backward (branch conv-bwd-fp64) sends down
its double path, under the error bound it uses and under tighter ones. CPU only, float64.

    python scripts/conv_pool_unsure.py [--config bench]

The kernel recomputes each window's four z = conv(x) + bias on fp32 GEMMs and rechecks a window in double when its
decision (the first strict maximum, passed iff > 0) lies within twice the recompute's error bound of a tie or of
zero. The bound is proportional to S, an upper bound of sum |w x| over the output's products. The kernel takes
S = kdim * max|w| * max|x| for every output; this counts the windows that the kernel's margin and margins from
tighter S (the output channel's sum |w| times max|x|; the same per sample; the exact sum |w x|, times 1.01) send
down the double path, on the task's config with its own initialisation (task.toml's args, kaiming weights, N(0, 1)
inputs, seed 4 as `bench`). The fewer, the faster: each such window is one thread's serial loop while its warp waits.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F

from engine.tasks.loader import load_task


def margin(s: torch.Tensor, kdim: int, bias: torch.Tensor) -> torch.Tensor:
    """The kernel's z_margin: twice (kdim adds of 2^-23 and 2^-20 per product, of S; the bias add's 2^-23)."""
    return 2 * ((kdim * 2.0 ** -23 + 2.0 ** -20) * s + 2.0 ** -23 * (s + bias.abs().view(1, -1, 1, 1)))


def unsure_share(windows: torch.Tensor, m: torch.Tensor) -> float:
    """Share of windows [B, Co, PH, PW, 4] whose decision lies within m ([B, Co, PH, PW]) of a tie or of zero."""
    top, sel = windows.max(-1)
    gap = top.unsqueeze(-1) - windows
    gap.scatter_(-1, sel.unsqueeze(-1), math.inf)
    close = (gap <= m.unsqueeze(-1)).any(-1) | (top.abs() <= m)
    return ((top >= -m) & close).double().mean().item()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="bench")
    args = ap.parse_args()
    task = load_task("mnist_conv_relu_pool")
    cfg = next(c for c in task.configs if c.name == args.config)
    a = {**cfg.model_kwargs, **cfg.input_kwargs}
    torch.manual_seed(4)
    conv = torch.nn.Conv2d(a["in_channels"], a["out_channels"], a["kernel_size"])
    torch.nn.init.kaiming_uniform_(conv.weight, a=math.sqrt(5))
    torch.nn.init.normal_(conv.bias, 0.0, 0.1)
    w, b = conv.weight.detach().double(), conv.bias.detach().double()
    x = torch.randn(a["batch_size"], a["in_channels"], a["height"], a["width"], dtype=torch.float64)
    kdim = w[0].numel()
    z = F.conv2d(x, w, b)
    ph, pw = z.shape[2] // 2, z.shape[3] // 2
    wins = z[:, :, :2 * ph, :2 * pw].unfold(2, 2, 2).unfold(3, 2, 2).reshape(*z.shape[:2], ph, pw, 4)
    exact = F.conv2d(x.abs(), w.abs())[:, :, :2 * ph, :2 * pw].unfold(2, 2, 2).unfold(3, 2, 2)
    exact = exact.reshape(*z.shape[:2], ph, pw, 4).amax(-1)
    shape = wins.shape[:4]
    wl1 = w.abs().sum((1, 2, 3)).view(1, -1, 1, 1)
    bounds = {
        "kdim * max|w| * max|x| (the kernel's)": (kdim * w.abs().max() * x.abs().max()).expand(shape),
        "sum|w| of the channel * max|x|": (wl1 * x.abs().max()).expand(shape),
        "the same, max|x| of the sample": (wl1 * x.abs().amax((1, 2, 3)).view(-1, 1, 1, 1)).expand(shape),
        "sum|w x| of the output, x 1.01": exact * 1.01,
    }
    print(f"{args.config}: {math.prod(shape):,} windows, kdim {kdim}, mean sum|w x| {exact.mean().item():.2f}")
    print("| S | mean S | windows rechecked in double |\n| --- | ---: | ---: |")
    for name, s in bounds.items():
        print(f"| {name} | {s.mean().item():.2f} | {100 * unsure_share(wins, margin(s, kdim, b)):.3f} % |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
