"""What fresh inputs cost per timed call, measured with the timing helper itself (GPU): the helper's loop on a
1 GiB argument and on a ~10 us kernel's, once with the plain refill copy of a variant (the loop before fresh inputs)
and once with fresh values (the variant times per-element factors, engine/pipeline/judge/fresh.py), side by side.

    python scripts/bench_fresh_inputs.py [--rounds 3] [--json OUT.json]

Per row: the median gap between iterations on the helper's own clock (everything the loop does per call: the
refill or the fresh values, the L2 flush, the call, the synchronisations) and the median event time of the call
itself, which fresh inputs must not change (they are drawn outside the timed region). Rounds alternate plain and
fresh, so drift shows as spread between rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    # torch and the engine are imported here (lazily): --help needs neither
    import torch

    from engine.harness.toolchain import detect
    from engine.pipeline.eval_types import default_cache_root
    from engine.pipeline.judge.fresh import SCALE
    from engine.pipeline.judge.timer import LocalTimer
    from engine.pipeline.timer import build_timer
    from engine.config.sections import TimingParams

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    helper = build_timer(default_cache_root(), detect())
    local = LocalTimer(str(helper.so_path), helper.module_name)
    p = TimingParams(warmup=5, min_iters=50, max_iters=400, budget_s=0.5)
    big = torch.randn(1 << 28, device="cuda")          # 1 GiB of float32
    small = torch.randn(1 << 18, device="cuda")        # 1 MiB: a ~10 us elementwise kernel
    out_small = torch.empty_like(small)
    cases = [("1 GiB argument, no work in the call", big, lambda live: (lambda: None)),
             ("1 MiB argument, a ~10 us kernel", small,
              lambda live: (lambda: torch.mul(live[0], 2.0, out=out_small)))]
    rows = []
    for name, tensor, make in cases:
        variants = [[tensor], [tensor.clone()]]
        per: dict[str, list[tuple[float, float]]] = {"copy": [], "fresh": []}
        for _ in range(args.rounds):
            for mode in ("copy", "fresh"):
                live = [tensor.clone()]
                fresh = (((SCALE,), (1 / 16,)) if mode == "fresh" else ((), ()))
                job = local.time(make(live), live, variants, p, fresh=fresh)
                timed = job.timed()
                gaps = [(b.t_ns - a.t_ns) / 1e6 for a, b in zip(timed, timed[1:])]
                per[mode].append((statistics.median(gaps), statistics.median(c.ms for c in timed)))
                del live
        row = {"case": name, **{f"{m}_gap_ms": round(statistics.median(g for g, _ in v), 4) for m, v in per.items()},
               **{f"{m}_call_ms": round(statistics.median(c for _, c in v), 4) for m, v in per.items()},
               "rounds": per}
        row["added_per_call_us"] = round((row["fresh_gap_ms"] - row["copy_gap_ms"]) * 1e3, 1)
        rows.append(row)
        print(f"FRESH-ROW | {name} | gap per iteration: copy {row['copy_gap_ms']:.4f} ms, fresh {row['fresh_gap_ms']:.4f}"
              f" ms (+{row['added_per_call_us']:.1f} us) | the call's event time: copy {row['copy_call_ms']:.4f} ms, "
              f"fresh {row['fresh_call_ms']:.4f} ms", flush=True)
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
