"""Edit-to-verdict latency on one GPU: a person re-measuring a built candidate and hand-editing its kernel.

    python scripts/bench_latency.py [--task llama_rmsnorm] [--old OLD_TREE] [--edits 3] [--json F]

Everything with kbench's defaults ([eval] of a fresh config: every config checked and timed, eager and
torch.compile baselines, profile "best"), through the evaluator the app and `kbench reevaluate` use
(engine.evolve.factory.make_evaluator: warm judges, the session's baselines, the object cache). In order:

1. build the baseline (the precompiled header is built first, outside every timing);
2. `first`: its first evaluation in this process (a cold judge, every baseline measured);
3. `re-judge`: the same, already built candidate evaluated again, twice (what `r` in the app does);
4. `edit`: --edits hand edits of kernel.cu (a knob's value changed, binding.cpp untouched), each submitted as
   the app submits an edit: time from submission to the timing verdict (the profile of a new best comes after
   the verdict, on demand), with the build's own seconds beside it;
5. `one-shot`: the built candidate through `evaluate()` with EvalOptions() defaults in this process, no warm
   judge (what `kbench eval` does), and with --old the same in an older kbench tree (its own process, same
   build cache layout is not assumed: it builds first, untimed), for the ratio against that tree's path.

`--old-rejudge TREE` instead runs steps 2-3 in an older tree (its own process, after this tree's): the first
evaluation and `--rejudges` re-judgements through that tree's evaluator, for the re-judge ratio in one run.
Each row carries the judge's phases (`EvalReport.phases`) where the tree reports them.
`kbench eval` itself, as a process per run (its judge started as the command begins), is scripts/bench_eval.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.candidates import Candidate, load_candidate  # noqa: E402
from engine.config.load import load_config  # noqa: E402
from engine.evolve.factory import make_evaluator
from engine.pipeline.eval_types import options_from_config as eval_options  # noqa: E402
from engine.harness.build.stage import build_candidate
from engine.harness.pch import ensure_pch  # noqa: E402
from engine.harness.toolchain import detect  # noqa: E402
from engine.pipeline.eval_types import EvalOptions
from engine.pipeline.evaluate import evaluate  # noqa: E402
from engine.tasks.loader import load_task  # noqa: E402
from engine.verdict import Stage

OLD_CHILD = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
from engine.candidates import load_candidate
from engine.tasks.loader import load_task
try:
    from engine.pipeline.eval_types import EvalOptions
    from engine.pipeline.evaluate import evaluate
except ImportError:
    from engine.harness.evaluate import EvalOptions, evaluate
t = load_task(sys.argv[2]); c = load_candidate(t.baseline_dir("forward"))
evaluate(t, c, "forward", EvalOptions(timing=False, profile=False))       # builds, untimed
t0 = time.monotonic(); rep = evaluate(t, c, "forward", EvalOptions())
print("OLD " + json.dumps({"seconds": time.monotonic() - t0, "passed": rep.passed}))
'''


OLD_REJUDGE = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
from engine.candidates import load_candidate
from engine.config.load import load_config
from engine.evolve.factory import make_evaluator
from engine.pipeline.eval_types import options_from_config as eval_options
from engine.harness.build.stage import build_candidate
from engine.harness.pch import ensure_pch
from engine.harness.toolchain import detect
from engine.tasks.loader import load_task
from pathlib import Path
import os
cache = Path(os.environ["KBENCH_CACHE"])
t = load_task(sys.argv[2]); c = load_candidate(t.baseline_dir("forward"))
tc = detect(); ensure_pch(cache, tc); build_candidate(c, cache, tc)
config = load_config(None)
ev = make_evaluator(t, "forward", config, eval_options(config, cache_root=cache))
rows = []
for _ in range(1 + int(sys.argv[3])):
    t0 = time.monotonic(); out = ev.submit(c).result()
    rows.append({"total_s": round(time.monotonic() - t0, 2), "passed": out.judgement.eligible,
                 "speedup_eager": out.speedup_eager, "phases": (out.data or {}).get("phases")})
    print("OLD " + json.dumps(rows), flush=True)
ev.close()
'''


def knob_edits(kernel: str, n: int) -> list[str]:
    """n edited kernel.cu texts: one `#define NAME value // kbench:knob values=...` at a time set to another of
    its listed values (the edit a person makes when trying a block size)."""
    out = []
    for m in re.finditer(r"^#define (\w+) (\S+)\s*// kbench:knob values=([\w,]+)", kernel, re.M):
        for v in m.group(3).split(","):
            if v != m.group(2) and len(out) < n:
                out.append(kernel[:m.start(2)] + v + kernel[m.end(2):])
    if len(out) < n:
        raise SystemExit(f"only {len(out)} knob edits available")
    return out


def timed_submit(ev, cand: Candidate) -> dict:
    t0 = time.monotonic()
    at: dict[str, float] = {}
    fut = ev.submit(cand, lambda v: at.setdefault(v.stage, time.monotonic() - t0))
    out = fut.result()
    return {"verdict_s": round(at.get(Stage.TIMING, time.monotonic() - t0), 2), "total_s": round(time.monotonic() - t0, 2),
            "build_s": out.build_s, "passed": out.judgement.eligible, "speedup_eager": out.speedup_eager,
            "speedup_compile": out.speedup_compile, "phases": (out.data or {}).get("phases")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="llama_rmsnorm")
    ap.add_argument("--edits", type=int, default=3)
    ap.add_argument("--old", default=None, help="an older kbench tree to time `evaluate()` defaults in")
    ap.add_argument("--old-rejudge", default=None, metavar="TREE",
                    help="an older kbench tree: its first evaluation and re-judgements, after this tree's")
    ap.add_argument("--rejudges", type=int, default=2)
    ap.add_argument("--old-rejudges", type=int, default=1, help="re-judgements in the --old-rejudge tree")
    ap.add_argument("--no-one-shot", action="store_true", help="skip step 5")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")
    cache = Path(tempfile.mkdtemp(prefix="kbench-latency-"))
    os.environ["KBENCH_CACHE"] = str(cache)
    task = load_task(args.task)
    base = load_candidate(task.baseline_dir("forward"))
    rows: dict = {"task": task.name, "cache": str(cache)}

    def save() -> None:
        print(json.dumps(rows), file=sys.stderr, flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))

    tc = detect()
    rows["pch_s"] = round(ensure_pch(cache, tc).seconds, 2)
    b = build_candidate(base, cache, tc)
    rows["baseline_build_s"] = round(b.seconds, 2)
    config = load_config(None)
    ev = make_evaluator(task, "forward", config, eval_options(config, cache_root=cache))
    try:
        rows["first"] = timed_submit(ev, base)
        save()
        rows["re-judge"] = [timed_submit(ev, base) for _ in range(args.rejudges)]
        save()
        rows["edit"] = []
        for text in knob_edits(base.files["kernel.cu"], args.edits):
            edited = Candidate(base.format, dict(base.files, **{"kernel.cu": text}), "edit")
            rows["edit"].append(timed_submit(ev, edited))
            save()
    finally:
        ev.close()
    if not args.no_one_shot:
        t0 = time.monotonic()
        rep = evaluate(task, base, "forward", EvalOptions(cache_root=cache))
        rows["one-shot"] = {"seconds": round(time.monotonic() - t0, 2), "passed": rep.passed,
                            "phases": rep.phases}
        save()
    if args.old_rejudge:
        p = subprocess.run([sys.executable, "-c", OLD_REJUDGE, str(Path(args.old_rejudge).resolve()), task.name,
                            str(args.old_rejudges)], capture_output=True, text=True, timeout=1200,
                           env={**os.environ, "KBENCH_CACHE": str(cache),
                                "PYTHONPATH": os.pathsep.join([str(Path(args.old_rejudge).resolve()),
                                                               os.environ.get("PYTHONPATH", "")])})
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("OLD ")]
        rows["old first+re-judge"] = json.loads(lines[-1][4:]) if lines else {"error": p.stderr[-2000:]}
        save()
    if args.old:
        p = subprocess.run([sys.executable, "-c", OLD_CHILD, str(Path(args.old).resolve()), task.name],
                           capture_output=True, text=True, timeout=900,
                           env={**os.environ, "KBENCH_CACHE": str(cache / "old"),
                                "PYTHONPATH": os.pathsep.join([str(Path(args.old).resolve()),
                                                               os.environ.get("PYTHONPATH", "")])})
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("OLD ")), None)
        rows["old one-shot"] = json.loads(line[4:]) if line else {"error": p.stderr[-2000:]}
        save()
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
