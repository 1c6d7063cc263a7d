#!/usr/bin/env python
"""Benchmark the git workspace: commit latency, and listing a big session with its latest verdicts.

Builds a session of N candidates (default 10,000) through the public Workspace API, the way an evolution
run would: generations of 50, mutations (one parent) and crossovers (two parents, a merge commit), and
for each candidate one note append with static/compile/correctness verdicts and, for those that pass, a
measurement with per-config timings. Then times:

  * committing a candidate (median ms) into a small fresh session and, during the build, into the big one;
  * appending a candidate's judgements (median ms);
  * listing every candidate of the big session with its latest verdicts (`Workspace.candidates`, a fresh
    Workspace each time), and `kbench log SESSION --json` end to end (Python start-up included).

    python scripts/bench_workspace.py                  # 10,000 candidates in a temp dir
    python scripts/bench_workspace.py -n 2000 --keep --dir /tmp/ws-bench
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.candidates import Candidate  # noqa: E402
from engine.tasks.loader import load_task  # noqa: E402
from engine.verdict import Stage, Status, Verdict  # noqa: E402
from engine.workspace import ConfigTiming, Measurement, Workspace  # noqa: E402

GEN_SIZE = 50
BINDING = "#include <torch/extension.h>\n// binding glue, identical across candidates\n" + "// pad\n" * 60
PROMPT = "Make the layernorm kernel faster. Current best uses one warp per row.\n" * 12
ENV = dict(gpu="NVIDIA H100 80GB HBM3", driver="550.54.15", torch="2.5.1", cuda="12.4")


def kernel_source(i: int, rng: random.Random) -> str:
    block = rng.choice([128, 256, 512, 1024])
    vec = rng.choice([1, 2, 4])
    body = "".join(f"    acc{j} += x[i * {j + 1}] * {rng.random():.6f}f;  // step {j}\n" for j in range(40))
    return (f"// candidate {i}\n#define BLOCK_SIZE {block}  // kbench:knob values=128,256,512,1024\n"
            f"#define VEC {vec}  // kbench:knob values=1,2,4\n__global__ void k(const float* x, float* y) {{\n"
            f"{body}}}\n")


def judgements(rng: random.Random, passed: bool) -> list:
    from engine.workspace import VerdictNote
    out = [VerdictNote(Verdict(Stage.STATIC, Status.PASS)),
           VerdictNote(Verdict(Stage.COMPILE, Status.PASS, "", {"seconds": round(rng.uniform(5, 9), 2)}))]
    if not passed:
        out.append(VerdictNote(Verdict(Stage.CORRECTNESS, Status.FAIL, "max abs err 3.1e-2 on odd-37x1000")))
        return out
    out.append(VerdictNote(Verdict(Stage.CORRECTNESS, Status.PASS, "all 4 configs within atol/rtol")))
    configs = []
    for name in ("odd-37x1000", "1024x4096", "4096x1024", "odd-333x777"):
        ms = rng.uniform(0.01, 0.2)
        configs.append(ConfigTiming(name, ms, ms * 0.02, ms * rng.uniform(0.8, 3.0), ms * rng.uniform(0.7, 2.0)))
    geo = lambda xs: statistics.geometric_mean(xs)
    out.append(Measurement(geo([c.speedup_eager for c in configs]), geo([c.speedup_compile for c in configs]),
                           tuple(configs), **ENV))
    return out


def build(ws: Workspace, session: str, n: int, seed: int = 0, progress: bool = True) -> dict:
    rng = random.Random(seed)
    commit_ms, note_ms = [], []
    prev: list[str] = []
    cur: list[str] = []
    t_start = time.perf_counter()
    for i in range(n):
        if i % GEN_SIZE == 0 and i:
            prev, cur = cur, []
        if not prev:
            parents, op = [], "translate"
        elif rng.random() < 0.2 and len(prev) > 1:
            parents, op = rng.sample(prev, 2), "crossover"
        else:
            parents, op = [rng.choice(prev)], rng.choice(["mutate", "tune", "repair"])
        cand = Candidate("native", {"kernel.cu": kernel_source(i, rng), "binding.cpp": BINDING}, f"variant {i}",
                         {"rationale": f"try block/vec combination #{i}; unroll the inner loop"})
        t0 = time.perf_counter()
        rec = ws.commit_candidate(session, cand, parents=parents, operator=op, prompt=PROMPT,
                                  generation=i // GEN_SIZE)
        t1 = time.perf_counter()
        ws.record(rec.id, judgements(rng, rng.random() < 0.7))
        t2 = time.perf_counter()
        commit_ms.append((t1 - t0) * 1000)
        note_ms.append((t2 - t1) * 1000)
        cur.append(rec.id)
        if progress and (i + 1) % 500 == 0:
            el = time.perf_counter() - t_start
            print(f"  {i + 1}/{n} candidates, {el:.0f} s, commit median {statistics.median(commit_ms[-500:]):.1f} ms,"
                  f" notes median {statistics.median(note_ms[-500:]):.1f} ms", file=sys.stderr, flush=True)
    return {"commit_ms": commit_ms, "note_ms": note_ms, "build_s": time.perf_counter() - t_start}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--candidates", type=int, default=10_000)
    ap.add_argument("--small", type=int, default=200, help="commits into a fresh session for the commit median")
    ap.add_argument("--repeat", type=int, default=7, help="listing repetitions")
    ap.add_argument("--dir", type=Path, default=None, help="workspace folder (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the workspace")
    ap.add_argument("--reuse", action="store_true", help="reuse an existing big session in --dir")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    tmp = args.dir or Path(tempfile.mkdtemp(prefix="kbench-ws-bench-")) / "ws"
    task = load_task(ROOT / "tasks" / "layernorm_lastdim")
    results: dict = {"machine": f"{platform.node()} · {os.cpu_count()} CPUs · Python {platform.python_version()} · "
                                f"{subprocess.run(['git', '--version'], capture_output=True, text=True).stdout.strip()}"}
    ws = Workspace.create(tmp)
    try:
        big = "big"
        if not (args.reuse and any(s.name == big for s in ws.sessions())):
            # 1. commits into a small fresh session
            ws.start_session("small", task, proposer="anthropic", model="claude-sonnet-4-5")
            rng = random.Random(1)
            small_ms, prev = [], None
            for i in range(args.small):
                cand = Candidate("native", {"kernel.cu": kernel_source(i, rng), "binding.cpp": BINDING}, f"v{i}")
                t0 = time.perf_counter()
                rec = ws.commit_candidate("small", cand, parents=[prev] if prev else [], prompt=PROMPT)
                small_ms.append((time.perf_counter() - t0) * 1000)
                prev = rec.id
            results["commit_small_median_ms"] = statistics.median(small_ms)
            results["commit_small_p90_ms"] = pct(small_ms, 0.9)
            # 2. the big session
            print(f"building a {args.candidates}-candidate session in {tmp} ...", file=sys.stderr)
            ws.start_session(big, task, proposer="anthropic", model="claude-sonnet-4-5")
            b = build(ws, big, args.candidates)
            results.update(commit_big_median_ms=statistics.median(b["commit_ms"]),
                           commit_big_p90_ms=pct(b["commit_ms"], 0.9),
                           notes_median_ms=statistics.median(b["note_ms"]), notes_p90_ms=pct(b["note_ms"], 0.9),
                           build_s=b["build_s"])
        ws.close()
        # 3. listing, fresh Workspace each time (no warm caches in memory): first with no listing cache on
        # disk (the first listing ever; closing writes it), then with it (every later process)
        from engine.workspace.listing_cache import FILENAME
        nodisk, times, count, with_verdicts = [], [], 0, 0
        for use_disk in (False, True):
            for _ in range(args.repeat):
                if not use_disk:
                    (Path(tmp) / ".git" / FILENAME).unlink(missing_ok=True)
                with Workspace.open(tmp) as w2:
                    t0 = time.perf_counter()
                    views = w2.candidates(big)
                    (times if use_disk else nodisk).append(time.perf_counter() - t0)
                count = len(views)
                with_verdicts = sum(1 for v in views if v.status.stages)
        results.update(listed=count, listed_with_verdicts=with_verdicts, list_median_s=statistics.median(times),
                       list_min_s=min(times), list_max_s=max(times), list_runs=len(times),
                       list_nodisk_median_s=statistics.median(nodisk), list_nodisk_max_s=max(nodisk))
        with Workspace.open(tmp) as w2:  # the same Workspace again: commits and note blobs are cached
            w2.candidates(big)
            t0 = time.perf_counter()
            w2.candidates(big)
            results["list_warm_s"] = time.perf_counter() - t0
        cli = []
        kbench = [sys.executable, "-c", "import sys; from engine.cli import main; sys.exit(main())"]
        for _ in range(max(1, args.repeat // 2 + 1)):
            t0 = time.perf_counter()
            proc = subprocess.run(kbench + ["--workspace", str(tmp), "log", big, "--json"], capture_output=True,
                                  cwd=ROOT)
            cli.append(time.perf_counter() - t0)
            if proc.returncode != 0:
                raise SystemExit(proc.stderr.decode())
        results["cli_log_json_median_s"] = statistics.median(cli)
        results["cli_log_rows"] = len(json.loads(proc.stdout)["candidates"])
        results["load_avg_1min"] = os.getloadavg()[0]
        fsck = subprocess.run(["git", "--git-dir", str(tmp / ".git"), "fsck", "--no-dangling"], capture_output=True)
        results["fsck_clean"] = fsck.returncode == 0
        results["loose_refs_kbench"] = sum(1 for _ in (tmp / ".git" / "refs" / "kbench" / big).iterdir())
        du = subprocess.run(["du", "-sm", str(tmp / ".git")], capture_output=True, text=True).stdout.split()
        results["git_dir_mb"] = int(du[0]) if du else None
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(tmp.parent, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        r = results
        print(f"machine: {r['machine']}")
        if "commit_small_median_ms" in r:
            print(f"commit a candidate, fresh session ({args.small} commits): median {r['commit_small_median_ms']:.1f} ms,"
                  f" p90 {r['commit_small_p90_ms']:.1f} ms")
            print(f"commit a candidate, while building {args.candidates}: median {r['commit_big_median_ms']:.1f} ms, "
                  f"p90 {r['commit_big_p90_ms']:.1f} ms")
            print(f"append a candidate's verdicts + measurement: median {r['notes_median_ms']:.1f} ms, "
                  f"p90 {r['notes_p90_ms']:.1f} ms")
            print(f"build of the {args.candidates}-candidate session: {r['build_s']:.0f} s")
        print(f"list {r['listed']} candidates with latest verdicts ({r['listed_with_verdicts']} with verdicts), "
              f"fresh Workspace, {r['list_runs']} runs: median {r['list_median_s']:.3f} s, min {r['list_min_s']:.3f} s, "
              f"max {r['list_max_s']:.3f} s; again in the same Workspace: {r['list_warm_s']:.3f} s; with no listing "
              f"cache on disk (the first listing ever): median {r['list_nodisk_median_s']:.3f} s, "
              f"max {r['list_nodisk_max_s']:.3f} s")
        print(f"`kbench log big --json` end to end ({r['cli_log_rows']} rows): median {r['cli_log_json_median_s']:.3f} s")
        print(f"git fsck clean: {r['fsck_clean']}; .git size {r['git_dir_mb']} MB; "
              f"load average (1 min) at the end: {r['load_avg_1min']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
