"""Every problem of a KernelBench or robust-kbench checkout judged with its own reference as the candidate: the
corpus table of BENCHMARKS.md. A candidate that is correct by construction must never be failed (the goal: 0).

    python scripts/bench_corpus.py run PATH --out RESULTS.jsonl [--levels 1,2,3] [--all] [--only SUBSTR]
                                       [--gpus 0,1,...] [--budget-s S] [--timeout S] [--retry-unmeasured]
    python scripts/bench_corpus.py table RESULTS.jsonl [MORE.jsonl ...] [--largest 10]

`run` judges the problems of PATH (a ScalingIntelligence/KernelBench checkout: KernelBench/level*/*.py, levels 1-3
unless --levels says otherwise; or a SakanaAI/robust-kbench one: its task folders under tasks/, and with --all its
KernelBench conversions under tasks/kernelbench/) for correctness and integrity, forward only, no timing, the static
gate overridden (the reference computes with torch), one problem at a time per GPU: one worker per entry of --gpus
(default: this process on the visible GPU). Each problem's result is appended to RESULTS.jsonl as one JSON line as
soon as it is judged. Problems already there are skipped (with --retry-unmeasured, those left unmeasured are judged
again), so a run cut short by a device's time limit goes on where it stopped; no problem starts once --budget-s has
passed since the run began, so a run under `timeout` ends on its own between problems.

The candidates: a KernelBench problem's own file with `class ModelNew(Model): pass` added; a robust-kbench task
folder's func_forward.py with `forward = forward_fn` added (and a ModelNew, which the KernelBench compile stage
looks for). Each line holds the problem, its verdict (passed, unmeasured, failed; error where kbench could not load
the problem), the reason, per config the footprint (one variant's inputs, weights and reference outputs) and the
judge's and the runner's peak GPU memory, the seconds it took and the judge's phases. `table` prints the markdown
for BENCHMARKS.md: counts per corpus, every problem not passed with its reason, and the largest problems' memory
against their footprint.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from compat_check import find_layout, kernelbench_files, robust_kbench_folders  # noqa: E402

OWN_MODEL = "\n\n\nclass ModelNew(Model):   # kbench corpus run: the problem's own Model as the candidate\n    pass\n"
REFERENCE_FN = ("\n\n\nforward = forward_fn   # kbench corpus run: the task's own forward_fn as the candidate\n\n\n"
                "class ModelNew(Model):   # what the KernelBench compile stage looks for\n    pass\n")


def problems(path: Path, levels: list[str], everything: bool, only: str) -> list[dict[str, str]]:
    """The checkout's problems, each {"corpus", "group", "name", "path"}, in a stable order."""
    if find_layout(path) == "kernelbench":
        found = [(src, f) for src, f in kernelbench_files(path) if src.rsplit("level", 1)[-1] in levels]
        corpus = "kernelbench"
    else:
        found = [(src, d) for src, d in robust_kbench_folders(path, everything) if (d / "func_forward.py").is_file()]
        corpus = "robust-kbench"
    # a KernelBench file by its name; a robust-kbench folder by its path under tasks/ (task_1 is in every level)
    out = [{"corpus": corpus, "group": src, "path": str(p),
            "name": p.stem if p.is_file() else "/".join(p.parts[p.parts.index("tasks") + 1:] if "tasks" in p.parts
                                                         else p.parts[-1:])}
           for src, p in found]
    return [p for p in out if only in p["path"]]


def key(problem: dict[str, Any]) -> str:
    return f"{problem['group']}/{problem['name']}"


# The engine is imported inside the functions that judge (lazily): `table` needs none of it, nor torch.
def candidate_for(problem: dict[str, str]) -> Any:
    from engine.candidates import Candidate
    path = Path(problem["path"])
    if path.is_file():
        return Candidate("kernelbench", {"own_model.py": path.read_text() + OWN_MODEL}, name="own-model")
    return Candidate("kernelbench", {"reference_fn.py": (path / "func_forward.py").read_text() + REFERENCE_FN},
                     name="reference-fn")


def judged(problem: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """One problem judged: the result line."""
    from engine.errors import KbenchError
    from engine.pipeline.eval_types import EvalOptions
    from engine.pipeline.evaluate import evaluate
    from engine.tasks.loader import load_task
    from engine.verdict import Status
    t0 = time.monotonic()
    row: dict[str, Any] = {**problem}
    try:
        task = load_task(problem["path"])
    except KbenchError as exc:
        return {**row, "verdict": "error", "reason": f"kbench could not load it: {exc}"[:600], "seconds": 0.0}
    opts = EvalOptions(trials=2, timing=False, override_static=True, profile=False, roofline=False,
                       library_policy="engineering", timeout_s=timeout_s, warm=True)
    try:
        rep = evaluate(task, candidate_for(problem), "forward", opts)
    except Exception as exc:  # noqa: BLE001 - a kbench failure on this problem: recorded, the run goes on
        return {**row, "verdict": "error", "reason": f"{type(exc).__name__}: {exc}"[:600],
                "seconds": round(time.monotonic() - t0, 1)}
    bad = [v for v in rep.verdicts if v.stage in ("compile", "correctness", "integrity") and v.status == Status.FAIL]
    if rep.unmeasured:
        verdict, reason = "unmeasured", rep.unmeasured
    elif bad:
        verdict, reason = "failed", f"{bad[0].stage}: {bad[0].reason}"
    elif (c := rep.verdict("correctness")) is not None and c.status == Status.PASS:
        verdict, reason = "passed", ""
    else:
        verdict, reason = "error", "; ".join(f"{v.stage} {v.status.value}: {v.reason}" for v in rep.verdicts)
    mem = rep.memory
    largest = max(mem.values(), key=lambda m: m["footprint"], default=None)
    return {**row, "verdict": verdict, "reason": reason[:1200], "seconds": round(time.monotonic() - t0, 1),
            "gpu": rep.device.get("gpu"), "configs": {r.name: r.correct for r in rep.rows}, "memory": mem,
            "footprint": largest["footprint"] if largest else None,
            "judge_peak": max((m["judge_allocated"] for m in mem.values()), default=None),
            "runner_peak": max((m["runner_allocated"] or 0 for m in mem.values()), default=None),
            "runner_kept": max((m.get("runner_kept") or 0 for m in mem.values()), default=None),
            "phases": {k: v for k, v in rep.phases.items() if isinstance(v, (int, float))}}


def done_keys(out: Path, retry_unmeasured: bool) -> set[str]:
    """Problems with a result in `out` (their latest line), but those left unmeasured when retrying them."""
    latest: dict[str, str] = {}
    if out.is_file():
        for line in out.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                latest[key(row)] = row["verdict"]
    return {k for k, v in latest.items() if not (retry_unmeasured and v == "unmeasured")}


def append(out: Path, row: dict[str, Any]) -> None:
    """One line, whole, whatever other workers append beside it."""
    with open(out, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps(row) + "\n")
        f.flush()


def work(todo: list[dict[str, str]], out: Path, deadline: float, timeout_s: float) -> int:
    """Judge `todo` in order until the deadline; the number judged."""
    n = 0
    for problem in todo:
        if time.time() >= deadline:
            print(f"budget spent: {len(todo) - n} problem(s) left for the next run", flush=True)
            break
        row = judged(problem, timeout_s)
        append(out, row)
        n += 1
        print(f"{row['verdict']:10} {key(row)} {row['seconds']:.0f} s {row['reason'][:160]}", flush=True)
    return n


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = done_keys(out, args.retry_unmeasured)
    todo = [p for p in problems(Path(args.path), args.levels.split(","), args.all, args.only) if key(p) not in done]
    deadline = (args.started or time.time()) + args.budget_s
    print(f"{len(todo)} problem(s) to judge, {len(done)} already in {out}", flush=True)
    gpus = [g for g in args.gpus.split(",") if g] if args.gpus else []
    if args.shard:   # a worker: its share of the list, on the GPU its environment names
        i, n = (int(x) for x in args.shard.split("/"))
        work(todo[i::n], out, deadline, args.timeout)
        return 0
    if len(gpus) <= 1:
        if gpus:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpus[0]
        work(todo, out, deadline, args.timeout)
        return 0
    base = [sys.executable, __file__, "run", args.path, "--out", str(out), "--levels", args.levels, "--only",
            args.only, "--budget-s", str(args.budget_s), "--timeout", str(args.timeout), "--started",
            str(deadline - args.budget_s)] + (["--all"] if args.all else []) + \
        (["--retry-unmeasured"] if args.retry_unmeasured else [])
    procs = [subprocess.Popen(base + ["--shard", f"{i}/{len(gpus)}"], env={**os.environ, "CUDA_VISIBLE_DEVICES": g})
             for i, g in enumerate(gpus)]
    return max(p.wait() for p in procs)


def mib(n: Any) -> str:
    return "-" if not n else f"{n / (1 << 20):,.0f}"


def times(n: Any, of: Any) -> str:
    return "-" if not n or not of else f"{n / of:.2f}x"


def table(paths: list[str], largest: int) -> str:
    rows: dict[str, dict[str, Any]] = {}
    for p in paths:
        for line in Path(p).read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows[key(row)] = row           # the latest result of each problem
    lines = ["| corpus | problems | passed | unmeasured | failed | error |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for corpus in sorted({r["group"] for r in rows.values()}):
        mine = [r for r in rows.values() if r["group"] == corpus]
        count = {v: sum(r["verdict"] == v for r in mine) for v in ("passed", "unmeasured", "failed", "error")}
        lines.append(f"| {corpus} | {len(mine)} | {count['passed']} | {count['unmeasured']} | {count['failed']} | "
                     f"{count['error']} |")
    lines += ["", "| problem | verdict | reason |", "| --- | --- | --- |"]
    lines += [f"| {k} | {r['verdict']} | {r['reason'][:300].replace('|', '/')} |"
              for k, r in sorted(rows.items()) if r["verdict"] != "passed"] or ["| (none) | | |"]
    big = sorted((r for r in rows.values() if r.get("footprint")), key=lambda r: -r["footprint"])[:largest]
    lines += ["", "| problem | footprint MiB | judge peak MiB | runner peak MiB | seconds |",
              "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {key(r)} | {mib(r['footprint'])} | {mib(r['judge_peak'])} ({times(r['judge_peak'], r['footprint'])}) "
              f"| {mib(r['runner_peak'])} ({times(r['runner_peak'], r['footprint'])}) | {r['seconds']:.0f} |" for r in big]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("path")
    r.add_argument("--out", required=True)
    r.add_argument("--levels", default="1,2,3")
    r.add_argument("--all", action="store_true", help="robust-kbench: its KernelBench conversions too")
    r.add_argument("--only", default="")
    r.add_argument("--gpus", default="", help="one worker per GPU index listed (default: the visible GPU)")
    r.add_argument("--budget-s", type=float, default=540.0)
    r.add_argument("--timeout", type=float, default=300.0, help="each problem's judge deadline")
    r.add_argument("--retry-unmeasured", action="store_true")
    r.add_argument("--shard", default="", help=argparse.SUPPRESS)
    r.add_argument("--started", type=float, default=0.0, help=argparse.SUPPRESS)
    t = sub.add_parser("table")
    t.add_argument("results", nargs="+")
    t.add_argument("--largest", type=int, default=10)
    args = ap.parse_args(argv)
    if args.cmd == "table":
        print(table(args.results, args.largest))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
