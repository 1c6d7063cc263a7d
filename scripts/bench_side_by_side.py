"""Two kbench trees side by side on one GPU: the same baselines evaluated by each, in turns, one build cache.

    git archive <old commit> | (mkdir -p old_kbench && tar -x -C old_kbench)
    python scripts/bench_side_by_side.py old_kbench . old_kbench [--tasks softmax:forward,gelu_bias:forward]

Each tree runs in its own child process (its own PYTHONPATH) and evaluates every listed baseline with
correctness on every config and timing of `bench` against eager (no profile). Trees run in the order given,
so a tree can be repeated to see run-to-run noise; the first run of the cache builds the kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
from engine.candidates import load_candidate
from engine.tasks.loader import load_task
try:
    from engine.pipeline.evaluate import EvalOptions, evaluate
except ImportError:          # trees from before the judge
    from engine.harness.evaluate import EvalOptions, evaluate
out = []
for name, d in json.loads(sys.argv[2]):
    t = load_task(name)
    t0 = time.monotonic()
    rep = evaluate(t, load_candidate(t.baseline_dir(d)), d,
                   EvalOptions(timing_configs=["bench"], baselines=("eager",), profile=False))
    b = next(r for r in rep.rows if r.name == "bench")
    out.append({"task": name, "direction": d, "passed": rep.passed, "candidate_ms": b.candidate_ms,
                "eager_ms": b.eager_ms, "speedup": b.speedup_eager, "seconds": round(time.monotonic() - t0, 2),
                "problems": [v.reason[:200] for v in rep.verdicts if v.status.value in ("fail", "suspicious")]})
print("RESULT " + json.dumps(out))
'''


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trees", nargs="+", help="kbench checkouts, run in this order")
    ap.add_argument("--tasks", default="softmax:forward,softmax:backward,gelu_bias:forward")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    tasks = [tuple(t.split(":")) for t in args.tasks.split(",")]
    runs = []
    for tree in args.trees:
        root = str(Path(tree).resolve())
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
        p = subprocess.run([sys.executable, "-c", CHILD, root, json.dumps(tasks)], cwd=root, env=env,
                           capture_output=True, text=True, timeout=3600)
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            print(f"{tree}: failed\n{p.stderr[-3000:]}")
            return 1
        runs.append((tree, json.loads(line[7:])))
    print("| tree | baseline | candidate ms | eager ms | speedup | wall s | passed |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    for tree, rows in runs:
        for r in rows:
            print(f"| {tree} | {r['task']} {r['direction']} | {r['candidate_ms']:.4f} | {r['eager_ms']:.4f} | "
                  f"{r['speedup']:.3f}x | {r['seconds']} | {r['passed']} {'; '.join(r['problems'])} |")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
