"""The baselines table for BENCHMARKS.md: every task and direction with a baseline, on one GPU.

    python scripts/bench_baselines.py [--tasks a,b] [--json out.json]

For each baseline: correctness on every config (kbench eval), then timing of the `bench` config against
eager PyTorch and torch.compile under the same protocol, the fraction of the measured roofline, and the
build time. Prints a markdown table (and JSON with --json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.candidates import load_candidate  # noqa: E402
from engine.pipeline.eval_types import EvalOptions
from engine.pipeline.evaluate import evaluate  # noqa: E402
from engine.harness.stats import geomean  # noqa: E402
from engine.tasks.loader import builtin_task_names, load_task  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="")
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    args = ap.parse_args()
    names = [n for n in args.tasks.split(",") if n] or builtin_task_names()
    rows = []
    for name in names:
        task = load_task(name)
        for direction in task.directions:
            base = task.baseline_dir(direction)
            if base is None:
                rows.append({"task": name, "direction": direction, "missing": True})
                continue
            t0 = time.monotonic()
            rep = evaluate(task, load_candidate(base), direction, EvalOptions(
                timing_configs=["bench"], baselines=("eager",) if args.no_compile else ("eager", "compile")))
            bench = next((r for r in rep.rows if r.name == "bench"), None)
            row = {"task": name, "direction": direction, "passed": rep.passed,
                   "verdicts": {v.stage: f"{v.status.value}: {v.reason}" for v in rep.verdicts},
                   "build_s": rep.build.get("seconds"), "cache_hit": rep.build.get("cache_hit"),
                   "seconds": round(time.monotonic() - t0, 1), "device": rep.device}
            if bench is not None:
                row.update(eager_ms=bench.eager_ms, compile_ms=bench.compile_ms, baseline_ms=bench.candidate_ms,
                           speedup_eager=bench.speedup_eager, speedup_compile=bench.speedup_compile,
                           roofline=bench.roofline_fraction)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(render(rows))
    return 0


def _f(v, fmt):
    return format(v, fmt) if isinstance(v, (int, float)) else "-"


def render(rows: list[dict]) -> str:
    out = ["| task | dir | eager ms | compile ms | baseline ms | vs eager | vs compile | roofline | build s | verdict |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        if r.get("missing"):
            out.append(f"| {r['task']} | {r['direction']} | | | | | | | | no baseline |")
            continue
        verdict = "pass" if r["passed"] else next((v for v in r["verdicts"].values() if not v.startswith("pass")), "fail")
        out.append(f"| {r['task']} | {r['direction'][:3]} | {_f(r.get('eager_ms'), '.4f')} | "
                   f"{_f(r.get('compile_ms'), '.4f')} | {_f(r.get('baseline_ms'), '.4f')} | "
                   f"{_f(r.get('speedup_eager'), '.2f')} | {_f(r.get('speedup_compile'), '.2f')} | "
                   f"{_f(r.get('roofline'), '.0%')} | {_f(r.get('build_s'), '.1f')} | {verdict[:80]} |")
    fwd = [r.get("speedup_eager") for r in rows if r.get("direction") == "forward" and r.get("passed")]
    out.append(f"\ngeomean speedup vs eager over passing forward baselines: {_f(geomean(fwd), '.2f')}")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
