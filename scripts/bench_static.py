"""Time the static integrity scan (engine.integrity.static.scan_candidate) per candidate: every built-in
baseline and every file of the static-rule corpus, best of N runs each, both library policies.

    python scripts/bench_static.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.candidates import Candidate, load_candidate  # noqa: E402
from engine.integrity.static import scan_candidate  # noqa: E402
from engine.tasks.loader import builtin_task_names, load_task  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    cases = []
    for name in builtin_task_names():
        task = load_task(name)
        for d in task.directions:
            if task.baseline_dir(d):
                cases.append((f"{name}/{d}", load_candidate(task.baseline_dir(d)), task))
    for p in sorted((ROOT / "tests" / "fixtures" / "corpus").rglob("*")):
        if p.suffix in (".cu", ".cpp", ".py"):
            fmt = "kernelbench" if p.suffix == ".py" else "robust-kbench"
            cases.append((f"corpus/{p.parent.name}/{p.name}", Candidate(fmt, {p.name: p.read_text()}), None))
    scan_candidate(cases[0][1], cases[0][2])   # load the grammar once, as a running evaluator has
    times = []
    for label, cand, task in cases:
        for policy in ("pure", "engineering"):
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                scan_candidate(cand, task, policy)
                best = min(best, time.perf_counter() - t0)
            times.append((best * 1e3, label, policy, sum(len(t) for t in cand.files.values())))
    times.sort()
    ms = [t[0] for t in times]
    print(f"{len(times)} scans: median {statistics.median(ms):.1f} ms, max {ms[-1]:.1f} ms "
          f"({times[-1][1]}, {times[-1][2]}, {times[-1][3]} chars)")
    return 0 if ms[-1] < 50 else 1


if __name__ == "__main__":
    raise SystemExit(main())
