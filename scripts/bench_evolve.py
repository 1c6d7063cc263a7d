"""Evolution throughput: a tuner session evaluated pipelined vs strictly one candidate after another.

Run on the GPU machine (each mode is one run; run them as separate commands if a command has a time limit):

    CUDA_HOME=/usr/local/cuda python scripts/bench_evolve.py --task gelu_bias --candidates 30 \
        --mode pipelined --json $OUT/pipelined.json
    CUDA_HOME=/usr/local/cuda python scripts/bench_evolve.py --task gelu_bias --candidates 30 \
        --mode sequential --json $OUT/sequential.json
    python scripts/bench_evolve.py --report $OUT/pipelined.json $OUT/sequential.json   # the BENCHMARKS.md table

`--max-wall S` stops proposing after S seconds (running evaluations finish), so a long mode can be sampled
over a fixed window; `--deadline S` (and SIGTERM) abandons whatever still runs and reports what finished.

Each mode gets a fresh workspace and a fresh compile cache (the precompiled torch header is built first,
outside the timed window, so both modes pay the same cold nvcc builds). The session is the tuner from the
task's baseline: generation 0 (the baseline) plus ceil(candidates / population) generations of `population`.

Reported per mode: candidates evaluated, wall seconds (first submission to last result), candidates per hour,
and two GPU busy fractions:
- worker: the share of wall time a GPU worker was inside an evaluation (sandbox child start, correctness,
  timing); what the pipeline can fill;
- nvidia-smi: the share of 200 ms samples with utilization.gpu > 0 over the same window (a kernel ran),
  plus the mean utilization: what the GPU itself saw (nvidia-smi's utilization.gpu, read through NVML).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.evolve.local_executor import LocalPipelineExecutor
from engine.evolve.worker_fns import default_gpu
from engine.evolve.loop import Budgets, EvolutionSession
from engine.harness import nvml
from engine.pipeline.eval_types import EvalOptions
from engine.proposers.tuner import TunerProposer
from engine.tasks.loader import load_task
from engine.workspace import Workspace


class SmiSampler:
    """utilization.gpu (nvidia-smi's figure, read through NVML: engine.harness.nvml) of `gpus` (NVML indices;
    default every GPU) every `period_ms`, with their monotonic times. No samples where NVML cannot say."""

    def __init__(self, gpus: list[int] | None, period_ms: int = 200):
        self.samples: list[tuple[float, list[int]]] = []
        self.gpus = gpus or None                  # none given: every GPU, as nvidia-smi without --id
        self.period_s = period_ms / 1000.0
        self._stop = threading.Event()
        self.thread: threading.Thread | None = None
        if nvml.gpu_utilization(self.gpus) is None:    # no pynvml / driver: as nvidia-smi missing was
            return
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        with nvml.held():   # one attach to the driver for the whole run, not one per sample
            while not self._stop.is_set():
                t = time.monotonic()
                util = nvml.gpu_utilization(self.gpus)
                if util:
                    self.samples.append((time.monotonic(), [util[i] for i in sorted(util)]))
                self._stop.wait(max(0.0, self.period_s - (time.monotonic() - t)))

    def stop(self) -> None:
        self._stop.set()
        if self.thread is not None:
            self.thread.join(5)

    def summary(self, t0: float, t1: float) -> dict:
        rows = [r for t, r in self.samples if t0 <= t <= t1]
        vals = [u for r in rows for u in r]
        if not vals:
            return {"samples": 0, "busy_fraction": None, "mean_util": None}
        return {"samples": len(rows), "busy_fraction": sum(1 for u in vals if u > 0) / len(vals),
                "mean_util": sum(vals) / len(vals) / 100.0}


def run_mode(args: argparse.Namespace, mode: str) -> dict:
    from engine.harness.pch import ensure_pch
    from engine.harness.toolchain import detect

    task = load_task(args.task)
    direction = "backward" if args.backward else "forward"
    root = Path(tempfile.mkdtemp(prefix=f"kbench-bench-evolve-{mode}-"))
    cache = root / "cache"
    fakes: dict = {}
    if args.fake:   # a CPU dry run of this script: sleeps instead of nvcc and the GPU
        from tests.doubles.evaluator import fake_build, fake_gpu
        fakes = {"build_fn": functools.partial(fake_build, sleep_s=args.fake[0]),
                 "gpu_fn": functools.partial(fake_gpu, sleep_s=args.fake[1])}
        pch = None
    else:
        pch = ensure_pch(cache, detect())   # outside the timed window, for both modes alike
    ws = Workspace.create(root / "ws")
    gens = math.ceil(args.candidates / args.population)
    profile = "all" if args.old else args.profile
    opts = EvalOptions(trials=args.trials, cache_root=cache, timeout_s=args.timeout, timing_configs=args.time_config,
                       baselines=("eager",) if args.no_compile_baseline else ("eager", "compile"),
                       profile=profile == "all")
    if args.old:
        # the GPU stage as it was before warm judges and session baselines: a cold judge per candidate
        fakes.setdefault("gpu_fn", functools.partial(default_gpu, warm=False))
    gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else None
    ex = LocalPipelineExecutor(task, direction, opts, gpus=gpus, build_workers=args.build_workers,
                               pipelined=(mode == "pipelined"), **fakes)
    smi = SmiSampler([g for g in ex.gpus if g is not None] or None)
    phases = _collect_phases(ex)
    s = EvolutionSession(ws, f"bench-{mode}", task, TunerProposer(), ex, direction=direction,
                         budgets=Budgets(generations=gens, population=args.population, wall_s=args.max_wall),
                         seed=args.seed, profile=profile)
    s.subscribe(lambda e: print(f"[{mode}] {e.line()}", flush=True) if args.verbose or e.kind in (
        "CandidateEvaluated", "GenerationFinished", "Stopped", "BudgetExhausted") else None)
    t0 = time.monotonic()
    cut = threading.Event()

    def stop_now(*_):   # SIGTERM (e.g. `timeout`) or --deadline: keep what finished, write the results
        cut.set()
        s.stop(wait_for_evaluations=False)
    old_term = signal.signal(signal.SIGTERM, stop_now)
    timer = threading.Timer(args.deadline, stop_now) if args.deadline else None
    if timer:
        timer.daemon = True
        timer.start()
    try:
        result = s.run()
    finally:
        if timer:
            timer.cancel()
        signal.signal(signal.SIGTERM, old_term)
    ex.close(wait=not cut.is_set())
    stats = ex.stats()
    smi.stop()
    first = min((a for iv in stats["intervals"].values() for a, _ in iv), default=t0)
    views = ws.candidates(s.session)
    base = views[0].speedup if views and views[0].record.operator == "baseline" else None
    best = ws.best(s.session)
    out = {
        "mode": mode, "task": task.name, "direction": direction, "gpus": [str(g) for g in ex.gpus],
        "build_workers": ex.build_workers, "population": args.population, "generations": gens,
        "candidates": len(views), "evaluated": stats["completed"], "wall_s": stats["wall_s"],
        "session_s": time.monotonic() - t0, "candidates_per_hour": stats["candidates_per_hour"],
        "worker_busy_fraction": stats["gpu_busy_fraction"], "gpu_busy_s": stats["gpu_busy_s"],
        "compile_s": stats["build_s"], "nvidia_smi": smi.summary(first, first + (stats["wall_s"] or 0.0)),
        "pch": {"seconds": getattr(pch, "seconds", None)}, "stopped": result.reason,
        "baseline_speedup": base, "best": best.id if best else None, "best_speedup": best.speedup if best else None,
        "failed": sum(1 for v in views if v.status.blocked), "workspace": str(root / "ws"),
        "max_wall": args.max_wall, "profile": profile, "cut_short": cut.is_set(), "old": args.old,
        "phases_median": _medians(phases), "phases": phases,
    }
    ws.close()
    return out


def _collect_phases(ex: LocalPipelineExecutor) -> list[dict]:
    """Each evaluated candidate's phases (its report's, as the outcome carries them), in completion order: where a
    candidate's GPU-worker seconds went."""
    found: list[dict] = []
    submit = ex.submit

    def keep(future) -> None:
        if not future.cancelled() and future.exception() is None:
            found.append(dict((future.result().data or {}).get("phases") or {}))

    def submitted(candidate, on_stage=None):
        future = submit(candidate, on_stage)
        future.add_done_callback(keep)
        return future
    ex.submit = submitted
    return found


def _medians(rows: list[dict]) -> dict[str, float]:
    import statistics
    keys = sorted({k for r in rows for k, v in r.items() if isinstance(v, (int, float))})
    return {k: round(statistics.median(r[k] for r in rows if isinstance(r.get(k), (int, float))), 3) for k in keys}


def report(rows: list[dict]) -> str:
    lines = ["| mode | task | GPUs | build workers | candidates | wall s | candidates/h | GPU busy (worker) | "
             "GPU busy (nvidia-smi) | mean util | baseline | best |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        smi = r.get("nvidia_smi") or {}

        def pct(x):
            return "-" if x is None else f"{100 * x:.0f} %"

        def xs(x):
            return "-" if x is None else f"{x:.3f}x"
        lines.append(f"| {r['mode']} | {r['task']} {r['direction']} | {len(r['gpus'])} | {r['build_workers']} | "
                     f"{r['evaluated']} | {r['wall_s']:.0f} | {r['candidates_per_hour'] or 0:.0f} | "
                     f"{pct(r['worker_busy_fraction'])} | {pct(smi.get('busy_fraction'))} | "
                     f"{pct(smi.get('mean_util'))} | {xs(r['baseline_speedup'])} | {xs(r['best_speedup'])} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="gelu_bias")
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--candidates", type=int, default=30, help="tuner candidates after the baseline (default 30)")
    ap.add_argument("--population", type=int, default=10)
    ap.add_argument("--mode", choices=["pipelined", "sequential", "both"], default="both")
    ap.add_argument("--gpus", default=None, help="GPU indices (default: every visible GPU)")
    ap.add_argument("--build-workers", type=int, default=None)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--no-compile-baseline", action="store_true", help="time against eager only (faster)")
    ap.add_argument("--profile", choices=["best", "all", "off"], default="best",
                    help="the session's profile mode (default best, kbench's default)")
    ap.add_argument("--old", action="store_true",
                    help="the behaviour before warm judges: a cold judge per candidate that measures every "
                         "baseline itself, and the profile stage inside every passing evaluation")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-config", action="append", default=None, metavar="NAME",
                    help="time only this config (repeatable), e.g. bench")
    ap.add_argument("--max-wall", type=float, default=None, metavar="S",
                    help="stop proposing after S seconds (running evaluations finish); rates stay comparable")
    ap.add_argument("--deadline", type=float, default=None, metavar="S",
                    help="after S seconds abandon running evaluations and report what finished (also on SIGTERM)")
    ap.add_argument("--json", default=None, help="write the result rows here")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--fake", nargs=2, type=float, default=None, metavar=("BUILD_S", "GPU_S"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--report", nargs="+", default=None, metavar="JSON", help="print the table from result files")
    args = ap.parse_args()
    if args.report:
        rows = []
        for p in args.report:
            data = json.loads(Path(p).read_text())
            rows.extend(data if isinstance(data, list) else [data])
        print(report(rows))
        return 0
    os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")
    modes = ["pipelined", "sequential"] if args.mode == "both" else [args.mode]
    rows = []
    for m in modes:
        rows.append(run_mode(args, m))
        if args.json:   # after each mode, so a later cut loses nothing already measured
            Path(args.json).write_text(json.dumps(rows, indent=2, default=str))
    print(json.dumps(rows, indent=2, default=str))
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
