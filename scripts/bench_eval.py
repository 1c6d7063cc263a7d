"""`kbench eval` of a built candidate, side by side in one call: this tree with fresh baselines (cold), this tree
with the baselines it keeps on disk (cached), the same claiming the judge the previous command kept (kept judge),
and an older tree the same way; N rounds, interleaved, `--pause` seconds between commands (a person reading the
verdict: the time a kept judge has to come up).

    python scripts/bench_eval.py [--task llama_rmsnorm] [--candidate DIR] [--old OLD_TREE] [-n 5] [--json F]
                                 [--pause 8] [--nvml-stand-in]

Only the "kept judge" runs keep a judge for the next command (`[eval] keep_judge_s`, engine/pipeline/kept_judge.py),
in a state folder of their own, so no other run claims it; the rest run with KBENCH_KEEP_JUDGE_S=0. The judges
still kept at the end are ended.

Each run is the CLI a person runs, `python -m engine.cli eval TASK CANDIDATE --json` in a process of its own,
with the tree on PYTHONPATH, from a neutral folder, with kbench's defaults (a private KBENCH_CACHE, shared by the
trees: the same build cache layout, the same baselines file). Before the rounds, each tree evaluates the
candidate once, untimed (the build, the timing helper, the kept toolchain and the baselines are then on disk).

Per run: the wall time from start to exit, the exit code, and the report's phases: when the judge was asked for
the verdict (`request at`, seconds since the process started: this tree's `start.judge_requested`; in the older
tree, whose report has no such phase, the moment its evaluate() called its judge, taken by a wrapper), how long
its judge took from then (`judge`), how long the judge took to start (a cold judge's `judge_start`, or the early
judge's `standby_up` and `standby_idle`: 0 means the request waited for the judge), the build's lookup. Prints
a markdown table (medians, with min-max) for BENCHMARKS.md; --json keeps every run.

`--nvml-stand-in` puts tests/fixtures/nvml_claims_gpu first on PYTHONPATH: on a machine without a GPU the judge
is then started as on a GPU machine and finds no GPU itself (exit 3), so everything up to the GPU work runs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAND_IN = REPO / "tests" / "fixtures" / "nvml_claims_gpu"

# The older tree's CLI with its evaluate()'s judge call timed (seconds since the process started), as its report
# lacks the start.* phases. The import it adds is one the CLI makes first thing anyway (its parser's).
OLD_BOOT = r'''
import json, os, sys, time
def age():
    t = open("/proc/self/stat").read()
    return time.clock_gettime(time.CLOCK_BOOTTIME) - int(t[t.rindex(")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")
import engine.pipeline.evaluate as ev
call = ev._run_judge
def timed(*a, **k):
    with open(os.environ["BENCH_EVAL_MARKS"], "a") as f:
        f.write(json.dumps({"request_at": round(age(), 3)}) + "\n")
    return call(*a, **k)
ev._run_judge = timed
from engine.cli import main
sys.exit(main(sys.argv[1:]))
'''


def run_once(tree: Path, args: list[str], env: dict[str, str], work: Path, old: bool) -> dict:
    marks = work / "marks.jsonl"
    marks.unlink(missing_ok=True)
    # the tree first; then what the caller had on PYTHONPATH (where a machine keeps kbench's dependencies)
    paths = ([str(STAND_IN)] if env.get("BENCH_STAND_IN") else []) + [str(tree)] + \
        [p for p in env.get("BENCH_OUTER_PATH", "").split(os.pathsep) if p]
    child_env = {**env, "PYTHONPATH": os.pathsep.join(paths), "BENCH_EVAL_MARKS": str(marks)}
    cmd = [sys.executable, "-c", OLD_BOOT, *args] if old else [sys.executable, "-m", "engine.cli", *args]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env, cwd=work, timeout=1200)
    wall = time.monotonic() - t0
    row: dict = {"wall": round(wall, 2), "rc": proc.returncode}
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        row["error"] = (proc.stderr or proc.stdout)[-2000:]
        return row
    ph = report.get("phases") or {}
    row.update(phases=ph, device=report.get("device") or {}, passed=report.get("passed"))
    if "start.judge_requested" in ph:
        row["request_at"] = ph["start.judge_requested"]
    elif marks.is_file() and (lines := marks.read_text().splitlines()):
        row["request_at"] = json.loads(lines[0])["request_at"]
    row["judge"] = ph.get("judge")
    # a kept judge was up before the command began: nothing of its start was waited for
    row["judge_start"] = 0.0 if ph.get("judge.kept") == 1.0 else ph.get("judge.judge_start", ph.get("judge.standby_up"))
    row["judge_idle"] = ph.get("judge.standby_idle")
    return row


def _cell(values: list, fmt: str = ".2f") -> str:
    vals = [v for v in values if isinstance(v, (int, float))]
    if not vals:
        return "-"
    med = format(statistics.median(vals), fmt)
    return med if len(vals) == 1 else f"{med} ({format(min(vals), fmt)}-{format(max(vals), fmt)})"


def table(runs: dict[str, list[dict]]) -> str:
    out = ["| run | wall s | request at s | judge s | judge start s | judge waited for request s | exit |",
           "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for kind, rows in runs.items():
        out.append(f"| {kind} | {_cell([r.get('wall') for r in rows])} | "
                   f"{_cell([r.get('request_at') for r in rows])} | "
                   f"{_cell([r.get('judge') for r in rows])} | {_cell([r.get('judge_start') for r in rows])} | "
                   f"{_cell([r.get('judge_idle') for r in rows])} | "
                   f"{','.join(sorted({str(r.get('rc')) for r in rows}))} |")
    base = [r["wall"] for r in runs.get("this tree, cached", []) if "wall" in r]
    for kind, rows in runs.items():
        other = [r["wall"] for r in rows if "wall" in r]
        if base and other and kind != "this tree, cached":
            out.append(f"\n{kind} / this tree cached, median wall: "
                       f"{statistics.median(other) / statistics.median(base):.2f}x")
    return "\n".join(out)


def _end_kept(state: Path) -> None:
    """The keepers the kept-judge runs left (their judges' supervisors go with them: parent-death signal)."""
    for path in state.glob("kbench/kept/*/keeper.json"):
        try:
            os.kill(int(json.loads(path.read_text())["pid"]), signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass


def _cut(signum, frame) -> None:
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="llama_rmsnorm")
    ap.add_argument("--candidate", default=None, help="default: the task's forward baseline")
    ap.add_argument("--old", default=None, help="an older kbench tree, run the same way in the same rounds")
    ap.add_argument("-n", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--nvml-stand-in", action="store_true", help="run the judge path on a machine without a GPU")
    ap.add_argument("--pause", type=float, default=8.0, help="seconds between commands (default 8)")
    args = ap.parse_args()
    # a run cut by its caller's time limit (SIGTERM) still prints the table of the rounds it finished
    signal.signal(signal.SIGTERM, _cut)
    cand = args.candidate or str(REPO / "tasks" / args.task / "baselines" / "forward")
    work = Path(tempfile.mkdtemp(prefix="kbench-bench-eval-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KBENCH_", "PYTHONPATH"))}
    env.update(KBENCH_CACHE=str(work / "cache"), CUDA_HOME=os.environ.get("CUDA_HOME", "/usr/local/cuda"),
               BENCH_OUTER_PATH=os.environ.get("PYTHONPATH", ""), KBENCH_KEEP_JUDGE_S="0",
               XDG_STATE_HOME=str(work / "state"), XDG_RUNTIME_DIR="")
    if args.nvml_stand_in:
        env["BENCH_STAND_IN"] = "1"
    kept_env = {**env, "KBENCH_KEEP_JUDGE_S": "300", "XDG_STATE_HOME": str(work / "kept-state")}
    old_tree = Path(args.old).resolve() if args.old else None
    # a tree from before the early judge has no start.* phases: its judge call is timed by OLD_BOOT's wrapper
    old_boot = old_tree is not None and not (old_tree / "engine" / "pipeline" / "early_judge.py").is_file()
    trees = [("this tree", REPO, False)] + ([("old tree", old_tree, old_boot)] if old_tree else [])
    for name, tree, old in trees:
        if not (tree / "engine" / "cli" / "__init__.py").is_file():
            raise SystemExit(f"{tree}: not a kbench tree")
        t0 = time.monotonic()
        try:
            first = run_once(tree, ["eval", args.task, cand, "--json"], env, work, old)
        except KeyboardInterrupt:
            raise SystemExit(f"cut during {name}'s first evaluation: nothing measured") from None
        print(f"{name}: first evaluation (build, helper, baselines) {time.monotonic() - t0:.1f} s, exit "
              f"{first.get('rc')}", file=sys.stderr, flush=True)
    kinds = [("this tree, --fresh-baselines", REPO, False, ["--fresh-baselines"], env),
             ("this tree, cached", REPO, False, [], env),
             ("this tree, cached, kept judge", REPO, False, [], kept_env)]
    if old_tree:
        kinds += [("old tree, --fresh-baselines", old_tree, old_boot, ["--fresh-baselines"], env),
                  ("old tree, cached", old_tree, old_boot, [], env)]
    run_once(REPO, ["eval", args.task, cand, "--json"], kept_env, work, False)   # leaves the first kept judge
    runs: dict[str, list[dict]] = {k[0]: [] for k in kinds}
    done = 0
    try:
        for i in range(args.n):
            for kind, tree, old, extra, kind_env in kinds:
                time.sleep(args.pause)
                row = run_once(tree, ["eval", args.task, cand, "--json", *extra], kind_env, work, old)
                runs[kind].append(row)
                print(f"round {i + 1} {kind}: {json.dumps({k: v for k, v in row.items() if k != 'phases'})}",
                      file=sys.stderr, flush=True)
            done = i + 1
    except KeyboardInterrupt:
        print(f"cut during round {done + 1}: the table holds what was measured", file=sys.stderr, flush=True)
    finally:
        _end_kept(work / "kept-state")
    device = next((r.get("device") for rows in runs.values() for r in rows if r.get("device")), {})
    print(f"`kbench eval {args.task}` of a built candidate, {done} of {args.n} rounds whole, on "
          f"{device.get('gpu') or 'no GPU'} (driver {device.get('driver')}, torch {device.get('torch')})\n")
    print(table({k: v for k, v in runs.items() if v}))
    if args.json:
        Path(args.json).write_text(json.dumps({"task": args.task, "candidate": cand, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
