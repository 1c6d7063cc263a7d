"""Repeatability of the timing protocol: --repeats independent evaluations of one kernel, their spread.

    python scripts/bench_timing_cv.py [--task layernorm] [--config bench] [--repeats 10]

Evaluates the task's forward baseline --repeats times through the judge and the jailed runner (each a full
protocol run: warm-up, L2 flush before every call, median over the iteration budget, eager baseline timed
by the judge with the same compiled loop), and prints the coefficient of variation (stdev / mean) of the
candidate's and the eager baseline's medians. Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.candidates import load_candidate  # noqa: E402
from engine.pipeline.eval_types import EvalOptions
from engine.pipeline.evaluate import evaluate  # noqa: E402
from engine.tasks.loader import load_task  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="layernorm_lastdim")
    ap.add_argument("--config", default="bench")
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()

    task = load_task(args.task)
    cand = load_candidate(task.baseline_dir("forward"))
    opts = EvalOptions(configs=[args.config], trials=2, baselines=("eager",), profile=False)
    medians: dict[str, list[float]] = {"candidate": [], "eager": []}
    gpu = ""
    for _ in range(args.repeats):
        rep = evaluate(task, cand, "forward", opts)
        row = rep.rows[0]
        if row.candidate_ms is None:
            print(json.dumps(rep.to_json()["verdicts"], indent=1))
            return 1
        medians["candidate"].append(row.candidate_ms)
        medians["eager"].append(row.eager_ms)
        gpu = rep.device.get("gpu") or ""
    out = {label: {"medians_ms": m, "mean_ms": statistics.fmean(m), "cv": statistics.stdev(m) / statistics.fmean(m)}
           for label, m in medians.items()}
    print(json.dumps({"gpu": gpu, "task": args.task, "config": args.config, **out}, indent=1))
    for label, r in out.items():
        print(f"{label}: mean of {args.repeats} medians {r['mean_ms']:.4f} ms, CV {r['cv'] * 100:.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
