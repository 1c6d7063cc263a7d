"""How far llama_rmsnorm backward's grad_weight, summed in the baseline's order, lands from the float64 sum, with
float32 or double at each step: a CPU emulation in numpy (no GPU needed).

grad_weight[c] = sum over rows of g * x * r, rows = 16,384 on robust-kbench's folder config (16 x 1024 tokens),
tolerance atol = rtol = 1e-5. The baseline (tasks/llama_rmsnorm/baselines/backward/kernel.cu) gives each thread of
a persistent grid the rows b, b + G, b + 2G, ... (G = 132 SMs x 8 blocks on an H200), then column_sum adds the G
partial rows in 32 slices of ~33 and the 32 slice sums. The rows' r comes from mean(x^2) over 4096 features.

    python scripts/emulate_rmsnorm_bwd_sums.py [--columns 512] [--grid 1056]

Prints, per variant (products, per-thread partials, column sum, r: float32 or double), the worst error as a
fraction of the tolerance and how many columns exceed it.
"""

from __future__ import annotations

import argparse

import numpy as np


def emulate(rows: int, cols: int, grid: int, features: int, seed: int = 1) -> list[tuple[str, float, int]]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    g = rng.standard_normal((rows, cols)).astype(np.float32)
    ss = (rng.standard_normal(rows) * np.sqrt(2.0 / features) + 1.0).astype(np.float32)   # mean(x^2) per row
    r32 = (1 / np.sqrt(ss.astype(np.float64))).astype(np.float32)
    r64 = 1 / np.sqrt(ss.astype(np.float64))
    exact = (g.astype(np.float64) * x.astype(np.float64) * r64[:, None]).sum(0)
    tol = 1e-5 + 1e-5 * np.abs(exact)
    out = []
    for name, prod64, part64, col64, rd in (("float32 throughout (the baseline before)", 0, 0, 0, r32),
                                            ("double column sum", 0, 0, 1, r32),
                                            ("double partials and column sum", 0, 1, 1, r32),
                                            ("double products, partials, column sum", 1, 1, 1, r32),
                                            ("all double, r too (the branch)", 1, 1, 1, r64)):
        if prod64:
            t = g.astype(np.float64) * x.astype(np.float64) * rd.astype(np.float64)[:, None]
        else:
            t = (g * x * rd.astype(np.float32)[:, None]).astype(np.float32)
        pt = np.float64 if part64 else np.float32
        part = np.stack([np.add.accumulate(t[b::grid].astype(pt), axis=0, dtype=pt)[-1] for b in range(grid)])
        ct = np.float64 if col64 else np.float32
        slices = np.zeros((32, cols), ct)
        for y in range(32):
            acc = np.zeros(cols, ct)
            for p in range(y, grid, 32):
                acc = (acc + part[p].astype(ct)).astype(ct)
            slices[y] = acc
        total = np.zeros(cols, ct)
        for q in range(32):
            total = (total + slices[q]).astype(ct)
        err = np.abs(total.astype(np.float32).astype(np.float64) - exact)
        out.append((name, float((err / tol).max()), int((err > tol).sum())))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--columns", type=int, default=512)
    ap.add_argument("--grid", type=int, default=1056)
    ap.add_argument("--features", type=int, default=4096)
    a = ap.parse_args()
    head = f"variant ({a.rows} rows, {a.columns} columns, grid {a.grid})"
    print(f"| {head} | worst error / tolerance | columns outside |")
    print("| --- | ---: | ---: |")
    for name, worst, n in emulate(a.rows, a.columns, a.grid, a.features):
        print(f"| {name} | {worst:.3f} | {n} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
