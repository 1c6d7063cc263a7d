"""Two kbench trees side by side on one GPU: the same baselines evaluated by each, in turns, one build cache.

    git archive <old commit> | (mkdir -p old_kbench && tar -x -C old_kbench)
    python scripts/bench_side_by_side.py old_kbench . old_kbench [--tasks softmax:forward,gelu_bias:forward]
        [--rounds 3] [--warm]

Each tree runs in its own child process (its own PYTHONPATH) and evaluates every listed baseline with
correctness on every config and timing of `bench` against eager (no profile). Trees run in the order given,
so a tree can be repeated to see run-to-run noise; the first run of the cache builds the kernels. `--rounds N`
evaluates the list N times in one process (an evolution's GPU worker evaluates one candidate after another);
`--warm` lets trees that have them use warm judges and the session's baselines (EvalOptions.warm,
reuse_baselines), as `kbench evolve` does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import dataclasses, json, sys, time
sys.path.insert(0, sys.argv[1])
from engine.candidates import load_candidate
from engine.tasks.loader import load_task
try:
    from engine.pipeline.eval_types import EvalOptions
    from engine.pipeline.evaluate import evaluate
except ImportError:          # trees from before the judge
    from engine.harness.evaluate import EvalOptions, evaluate
rounds, warm = int(sys.argv[3]), sys.argv[4] == "1"
opts = EvalOptions(timing_configs=["bench"], baselines=("eager",), profile=False)
fields = {f.name for f in dataclasses.fields(EvalOptions)}
if warm and "warm" in fields:   # what an evolution's GPU worker does (engine/evolve/worker_fns.py)
    opts = dataclasses.replace(opts, warm=True, **({"reuse_baselines": True} if "reuse_baselines" in fields else {}))
for rnd in range(rounds):
  for name, d in json.loads(sys.argv[2]):
    t = load_task(name)
    t0 = time.monotonic()
    rep = evaluate(t, load_candidate(t.baseline_dir(d)), d, opts)
    b = next(r for r in rep.rows if r.name == "bench")
    row = {"task": name, "direction": d, "round": rnd, "passed": rep.passed, "candidate_ms": b.candidate_ms,
                "eager_ms": b.eager_ms, "speedup": b.speedup_eager, "seconds": round(time.monotonic() - t0, 2),
                "phases": getattr(rep, "phases", {}),
                "problems": [rep.verdict(s).reason[:200] for s in rep.judgement.blocked_by]}
    print("ROW " + json.dumps(row), flush=True)   # streamed: a run cut short still shows what it measured

'''


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trees", nargs="+", help="kbench checkouts, run in this order")
    ap.add_argument("--tasks", default="softmax:forward,softmax:backward,gelu_bias:forward")
    ap.add_argument("--json", default=None)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--warm", action="store_true")
    args = ap.parse_args()
    tasks = [tuple(t.split(":")) for t in args.tasks.split(",")]
    runs = []
    for tree in args.trees:
        root = str(Path(tree).resolve())
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
        p = subprocess.Popen([sys.executable, "-c", CHILD, root, json.dumps(tasks), str(args.rounds),
                              "1" if args.warm else "0"], cwd=root, env=env, stdout=subprocess.PIPE, text=True)
        rows = []
        for line in p.stdout:
            if line.startswith("ROW "):
                rows.append(json.loads(line[4:]))
                r = rows[-1]
                print(f"{tree}: {r['task']} {r['direction']} round {r['round']}: {r['speedup']:.3f}x in {r['seconds']} s",
                      file=sys.stderr, flush=True)
        if p.wait() != 0:
            print(f"{tree}: the child exited with {p.returncode} (its stderr is above)")
            return 1
        runs.append((tree, rows))
    print("| tree | round | baseline | candidate ms | eager ms | speedup | wall s | passed |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | --- |")
    for tree, rows in runs:
        for r in rows:
            print(f"| {tree} | {r['round']} | {r['task']} {r['direction']} | {r['candidate_ms']:.4f} | {r['eager_ms']:.4f} | "
                  f"{r['speedup']:.3f}x | {r['seconds']} | {r['passed']} {'; '.join(r['problems'])} |")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
