"""robust-kbench's published kernels against kbench's baselines, on robust-kbench's own task folders, in one run.

    python scripts/bench_vs_published.py CHECKOUT [--pairs mnist_linear:backward,...] [--on folder|builtin]
                                         [--upstream] [--out TABLE.md] [--json ROWS.json] [--build] [--jobs N]

CHECKOUT is a robust-kbench checkout (SakanaAI/robust-kbench): `tasks/<task>/` (func_*.py, config_*.json) and
`highlighted/<task>/<direction>/kernel.cu`, its published kernels. Every published (task, direction) is a row, and so
is every task direction kbench ships a baseline for that upstream's folder has (resnet_block forward...). For each
row, one after the other on the same GPU: the published kernel unmodified, then kbench's built-in baseline
(tasks/<task>/baselines/<direction>), each checked on the direction's configs and timed on every one of them against
eager. `--on folder` (the default) evaluates on upstream's folder loaded as a robust-kbench task, i.e. upstream's own
settings (its four settings modes) and calling conventions; `--on builtin` on kbench's built-in task of that name
(its `rkb-*` configs, robust-kbench's settings as native configs). `--upstream` evaluates in the upstream mode
(docs/formats.md, "Evaluation modes": 5 trials, --use_fast_math, torch's default precision).

A published kernel is measured even where kbench's static scan would stop it (resnet_block's calls at::conv2d): the
scan's verdict is printed beside its speedup, as a person's override would have it. Per kernel: pass or the named
fault, and the geometric mean of its speedups over eager. The markdown table goes to stdout and `--out`.

Where no GPU is visible nothing can be measured: the script says so, prints the table of what it would run (each
row `no GPU`) and exits 3; `--build` compiles every kernel first, to check the builds on such a machine.

Before any measurement every kernel of the table is compiled, `--jobs` at a time (default: half the cores, at most 8),
into kbench's build cache, so the GPU then measures one kernel after another without waiting on nvcc; each build's
outcome is one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.candidates import load_candidate  # noqa: E402
from engine.harness.build import stage as builds  # noqa: E402
from engine.harness.device_info import no_gpu_visible  # noqa: E402
from engine.harness.stats import geomean  # noqa: E402
from engine.harness.toolchain_cache import cached_toolchain  # noqa: E402
from engine.pipeline import eval_mode  # noqa: E402
from engine.pipeline.eval_types import EvalOptions  # noqa: E402
from engine.pipeline.evaluate import evaluate  # noqa: E402
from engine.tasks.loader import builtin_task_names, load_task  # noqa: E402
from engine.tasks.model import ALL_CONFIGS, direction_configs  # noqa: E402

PUBLISHED, BASELINE = "robust-kbench published", "kbench baseline"


def pairs_of(checkout: Path) -> list[tuple[str, str]]:
    """Every published (task, direction), then every built-in baseline direction upstream's folder also has."""
    published = sorted((p.parent.parent.name, p.parent.name) for p in (checkout / "highlighted").glob("*/*/kernel.cu"))
    extra = []
    for name in builtin_task_names():
        folder = checkout / "tasks" / name
        for d in ("forward", "backward"):
            if (name, d) not in published and (folder / f"func_{d}.py").is_file() and \
                    load_task(name).baseline_dir(d) is not None:
                extra.append((name, d))
    return published + sorted(extra)


def kernels(checkout: Path, name: str, direction: str) -> list[tuple[str, Path | None]]:
    published = checkout / "highlighted" / name / direction / "kernel.cu"
    builtin = load_task(name).baseline_dir(direction) if name in builtin_task_names() else None
    return [(PUBLISHED, published if published.is_file() else None), (BASELINE, builtin)]


def _task(checkout: Path, name: str, on: str):
    return load_task(checkout / "tasks" / name if on == "folder" else name)


def prebuild(checkout: Path, pairs: list[tuple[str, str]], on: str, mode: str, jobs: int) -> int:
    """Compile every kernel of the table, `jobs` at a time, with the flags its evaluation will use (the mode's),
    into the build cache its evaluation reads; one line each on stderr. Returns how many failed."""
    cache_root = EvalOptions().cache_root
    base = cached_toolchain(cache_root)
    work = []
    for name, direction in pairs:
        tc = eval_mode.plan(_task(checkout, name, on), direction, mode).candidate_toolchain(base)
        work += [(f"{name} {direction} {who}", path, tc) for who, path in kernels(checkout, name, direction) if path]

    def one(item):
        label, path, tc = item
        return label, builds.build_candidate(load_candidate(path), cache_root, tc)

    failed = 0
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for label, built in pool.map(one, work):
            failed += not built.ok
            print(f"built {label}: " + (f"ok in {built.seconds:.1f} s" + (" (cached)" if built.cache_hit else "")
                                        if built.ok else f"failed: {' '.join(str(built.error).split())[:160]}"),
                  file=sys.stderr, flush=True)
    return failed


def measure(checkout: Path, name: str, direction: str, on: str, mode: str, measure_gpu: bool) -> list[dict]:
    task = _task(checkout, name, on)
    configs = direction_configs(task, direction)
    if on == "builtin":
        configs = [c for c in configs if c.startswith("rkb-")]
    opts = EvalOptions(configs=configs, timing_configs=[ALL_CONFIGS], trials=None if mode == "upstream" else 1,
                       baselines=("eager",), profile=False, override_static=True, mode=mode)
    rows = []
    for who, path in kernels(checkout, name, direction):
        row = {"task": name, "direction": direction, "kernel": who, "configs": len(configs), "on": on,
               "mode": mode, "status": "", "geomean_speedup": None, "per_config": {}, "verdicts": {}}
        rows.append(row)
        if path is None:
            row["status"] = "none"
            continue
        if not measure_gpu:
            row["status"] = "no GPU"
            continue
        rep = evaluate(task, load_candidate(path), direction, opts)
        row["verdicts"] = {v.stage: f"{v.status.value}: {v.reason[:200]}" for v in rep.verdicts}
        row["per_config"] = {r.name: {"candidate_ms": r.candidate_ms, "eager_ms": r.eager_ms,
                                      "speedup": r.speedup_eager, "correct": r.correct} for r in rep.rows}
        row["geomean_speedup"] = geomean(r.speedup_eager for r in rep.rows)
        row["status"] = "pass" if rep.passed else ("no GPU" if rep.unmeasured else _fault(rep))
        print(f"{name} {direction} {who}: {row['status']} geomean={row['geomean_speedup']}", file=sys.stderr,
              flush=True)
    return rows


def _fault(rep) -> str:
    """The first failing stage and its reason, on one line."""
    for v in rep.verdicts:
        if v.status.value in ("fail", "suspicious"):
            return f"{v.status.value} ({v.stage}): {' '.join(v.reason.split())[:160]}"
    return "not passed"


def table(rows: list[dict]) -> str:
    """One line per task direction: each kernel's status and geomean speedup over eager."""
    out = ["| task | direction | configs | published | kbench baseline |", "| --- | --- | --- | --- | --- |"]
    for key in dict.fromkeys((r["task"], r["direction"]) for r in rows):
        pair = {r["kernel"]: r for r in rows if (r["task"], r["direction"]) == key}
        cells = []
        for who in (PUBLISHED, BASELINE):
            r = pair.get(who)
            if r is None or r["status"] == "none":
                cells.append("-")
            elif r["geomean_speedup"] is not None and r["status"] == "pass":
                cells.append(f"{r['geomean_speedup']:.2f}x")
            elif r["geomean_speedup"] is not None:
                cells.append(f"{r['geomean_speedup']:.2f}x, {r['status']}")
            else:
                cells.append(r["status"])
        n = next(iter(pair.values()))["configs"]
        out.append(f"| {key[0]} | {key[1]} | {n} | {cells[0]} | {cells[1]} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", type=Path)
    ap.add_argument("--pairs", default=None, help="task:direction,... (default: every published one and every "
                                                  "built-in baseline direction upstream's folders have)")
    ap.add_argument("--on", choices=("folder", "builtin"), default="folder")
    ap.add_argument("--upstream", action="store_true", help="evaluate in the upstream mode")
    ap.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    ap.add_argument("--json", type=Path, default=None, help="every row, with per-config figures and verdicts")
    ap.add_argument("--build", action="store_true", help="without a GPU: compile every kernel anyway")
    ap.add_argument("--jobs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)),
                    help="kernels compiled at once before the measurements")
    args = ap.parse_args(argv)
    if not (args.checkout / "tasks").is_dir():
        print(f"bench_vs_published: {args.checkout} has no tasks/ folder: not a robust-kbench checkout",
              file=sys.stderr)
        return 2
    pairs = ([tuple(p.split(":")) for p in args.pairs.split(",")] if args.pairs else pairs_of(args.checkout))
    why = no_gpu_visible(None)
    if why is not None:
        print(f"bench_vs_published: no CUDA GPU is visible ({why}): nothing can be measured"
              + ("; compiling every kernel" if args.build else "; the table below is what a GPU run measures"),
              file=sys.stderr, flush=True)
    mode = "upstream" if args.upstream else "kbench"
    if why is None or args.build:
        prebuild(args.checkout, pairs, args.on, mode, args.jobs)
    rows: list[dict] = []
    for name, direction in pairs:
        rows.extend(measure(args.checkout, name, direction, args.on, mode, why is None or args.build))
        if args.json:   # after each pair: a run cut short keeps what it measured
            args.json.write_text(json.dumps(rows, indent=1))
    text = table(rows)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 3 if why is not None else 0


if __name__ == "__main__":
    sys.exit(main())
