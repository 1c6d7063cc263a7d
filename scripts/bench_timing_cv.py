"""Repeatability of the timing protocol: 10 independent measurements of one kernel, their spread.

    python scripts/bench_timing_cv.py [--task layernorm] [--config bench] [--repeats 10]

Builds the task's forward baseline, then measures it --repeats times with the harness's Timer (each a
full protocol run: warm-up, L2 flush before every call, median over the iteration budget), and prints
the coefficient of variation (stdev / mean) of the medians. Needs a GPU.
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
from engine.harness.build import build_candidate, load_module  # noqa: E402
from engine.harness.evaluate import default_cache_root  # noqa: E402
from engine.harness.runtimes import runtime_for  # noqa: E402
from engine.harness.timing import Timer  # noqa: E402
from engine.harness.toolchain import detect  # noqa: E402
from engine.tasks.loader import load_task  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="layernorm_lastdim")
    ap.add_argument("--config", default="bench")
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()

    import torch
    task = load_task(args.task)
    build = build_candidate(load_candidate(task.baseline_dir("forward")), default_cache_root(), detect())
    assert build.ok, build.error
    module = load_module(build)
    rt = runtime_for(task, "forward")
    cfg = next(c for c in task.configs if c.name == args.config)
    rt.setup(cfg, cfg.seed, torch.device("cuda"))
    timer = Timer()
    rows = {"candidate": rt.candidate_callable(module), "eager": rt.eager_callable()}
    out = {}
    for label, fn in rows.items():
        medians = [timer.measure(fn).median_ms for _ in range(args.repeats)]
        mean = statistics.fmean(medians)
        out[label] = {"medians_ms": medians, "mean_ms": mean, "cv": statistics.stdev(medians) / mean}
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "task": args.task, "config": args.config, **out},
                     indent=1))
    for label, r in out.items():
        print(f"{label}: mean of {args.repeats} medians {r['mean_ms']:.4f} ms, CV {r['cv'] * 100:.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
