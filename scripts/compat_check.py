"""What of an upstream checkout kbench can load, check and evaluate: the table for BENCHMARKS.md.

    python scripts/compat_check.py PATH [--check-task] [--eval] [--device cpu|cuda] [--all] [--only SUBSTR]
                                        [--json OUT.json] [--targets upstream,built-in] [--no-timing] [--jobs N]
                                        [--timeout S]

PATH is a checkout of SakanaAI/robust-kbench or ScalingIntelligence/KernelBench (or any folder inside one):
- robust-kbench: every task folder (a folder holding func_forward.py or func_backward.py) under tasks/; its own
  tasks first, then tasks/kernelbench/** (its KernelBench conversions) with --all.
- KernelBench: every problem file KernelBench/level*/*.py, by level.
For each: does `kbench show` load it (directions, configs, notes, or the error); with --check-task, `kbench
check-task` on --device (on a CPU, configs above its size limit are skipped); with --eval (needs a GPU), every
published robust-kbench kernel (highlighted/<task>/<direction>/kernel.cu) is evaluated unmodified on the upstream
task folder and on kbench's built-in task of the same name, and the verdicts are listed with their reasons.
Exit status 1 when something that should load does not (a robust-kbench task folder, a level 1-3 problem).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.errors import KbenchError  # noqa: E402
from engine.tasks.loader import builtin_task_names, load_task  # noqa: E402
from engine.tasks.robust_kbench import is_robust_kbench_task  # noqa: E402


@dataclass
class Row:
    source: str                    # robust-kbench | robust-kbench/kernelbench | kernelbench/level1 ...
    name: str
    path: str
    loads: bool = False
    directions: list[str] = field(default_factory=list)
    configs: int = 0
    notes: list[str] = field(default_factory=list)
    error: str = ""
    check: str = ""                # check-task summary
    shapes: str = ""               # KernelBench --shapes: which configs run on meta tensors
    must_load: bool = True


def find_layout(path: Path) -> str:
    if (path / "KernelBench").is_dir() or path.name.startswith("level") or \
            any(p.name.startswith("level") for p in path.glob("level*")):
        return "kernelbench"
    if (path / "tasks").is_dir() or is_robust_kbench_task(path) or any(path.rglob("func_forward.py")):
        return "robust-kbench"
    raise SystemExit(f"{path}: neither a robust-kbench checkout (tasks/*/func_*.py) nor a KernelBench one "
                     "(KernelBench/level*/*.py)")


def robust_kbench_folders(path: Path, everything: bool) -> list[tuple[str, Path]]:
    root = path / "tasks" if (path / "tasks").is_dir() else path
    found = sorted({p.parent for p in list(root.rglob("func_forward.py")) + list(root.rglob("func_backward.py"))})
    out = []
    for folder in found:
        nested = "kernelbench" in folder.relative_to(root).parts
        if nested and not everything:
            continue
        out.append(("robust-kbench/kernelbench" if nested else "robust-kbench", folder))
    return out


def kernelbench_files(path: Path) -> list[tuple[str, Path]]:
    root = path / "KernelBench" if (path / "KernelBench").is_dir() else path
    levels = sorted(root.glob("level*")) if not root.name.startswith("level") else [root]
    out = []
    for level in levels:
        files = sorted(level.glob("*.py"), key=lambda p: (int(p.name.split("_")[0]) if p.name[0].isdigit() else 0, p.name))
        out.extend((f"kernelbench/{level.name}", f) for f in files)
    return out


def load_row(source: str, path: Path) -> Row:
    row = Row(source, path.stem if path.is_file() else path.name, str(path), must_load=source != "kernelbench/level4")
    try:
        task = load_task(path)
    except KbenchError as exc:
        row.error = str(exc).replace(str(path), "<task>")
        return row
    row.loads, row.directions, row.configs, row.notes = True, list(task.directions), len(task.configs), list(task.notes)
    return row


CPU_MAX_ELEMENTS = 2e7   # inputs + parameters of one config, on a CPU (upstream tasks carry no cost model)


def config_elements(task, cfg) -> float | None:
    """Elements of a config's inputs and parameters, from a build on the meta device (no memory, no compute)."""
    import torch

    from engine.harness.runtimes import runtime_for
    from engine.harness.runtimes.robust_kbench import accepted_kwargs

    try:
        rt = runtime_for(task, next(iter(task.directions)))
        mod = rt.reference_module
        with torch.device("meta"):
            if task.format == "kernelbench":
                model = mod.Model(*mod.get_init_inputs())
                inputs = list(mod.get_inputs())
            else:
                model = mod.Model(**accepted_kwargs(mod.Model, cfg.model_kwargs))
                inputs = list(mod.get_inputs(**accepted_kwargs(mod.get_inputs, cfg.input_kwargs)))
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)] + list(model.parameters())
        return float(sum(t.numel() for t in tensors))
    except Exception:  # noqa: BLE001 - unknown size: let check-task try it
        return None


def check_row(row: Row, device: str) -> None:
    from engine.integrity.check_task import check_task

    task = load_task(row.path)
    t0 = time.monotonic()
    wanted = [c.name for c in task.configs]
    if device == "cpu":
        sizes = {c.name: config_elements(task, c) for c in task.configs}
        wanted = [n for n, e in sizes.items() if e is None or e <= CPU_MAX_ELEMENTS]
    if not wanted:
        row.check = f"all {len(task.configs)} configs too large for {device}"
        return
    try:
        results = check_task(task, seeds=2, device=device, configs=wanted)
    except Exception as exc:  # noqa: BLE001 - the table reports it
        row.check = f"error: {type(exc).__name__}: {str(exc)[:200]}"
        return
    ran = [r for r in results if not r.skipped]
    failed = [r for r in results if r.skipped.startswith("reference failed")]
    degenerate = [f"{r.direction}/{r.config}: {r.flags[0].split(':')[0]}" for r in ran if r.degenerate]
    large = (len(task.configs) - len(wanted)) * len(task.directions) + len(results) - len(ran) - len(failed)
    row.check = (f"{len(ran)} (direction, config) checked, {large} too large for {device}"
                 + (f", {len(failed)} reference failed ({failed[0].skipped[:120]})" if failed else "")
                 + (f", degenerate: {'; '.join(degenerate[:4])}" if degenerate else ", none degenerate")
                 + f" ({time.monotonic() - t0:.0f} s)")


def shapes_row(row: Row) -> None:
    """KernelBench: build each config's Model and inputs on the meta device and run the forward: shapes only, no
    memory or compute. A config that fails where seed0 runs (kbench's odd-size variant) breaks the problem."""
    import torch

    from engine.harness.runtimes.base import import_file
    from engine.harness.runtimes.kernelbench import module_constants
    from engine.harness.runtimes.robust_kbench import module_name

    task = load_task(row.path)
    try:
        mod = import_file(Path(row.path), module_name("kbench_compat", row.path))
    except Exception as exc:  # noqa: BLE001
        row.shapes = f"import failed: {type(exc).__name__}: {str(exc)[:150]}"
        return
    results = {}
    for cfg in task.configs:
        try:
            with torch.device("meta"), torch.no_grad():
                model = mod.Model(*mod.get_init_inputs())
                with module_constants(mod, cfg.input_kwargs):
                    inputs = mod.get_inputs()
                model(*inputs)
            results[cfg.name] = "ok"
        except Exception as exc:  # noqa: BLE001
            results[cfg.name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
    bad = {k: v for k, v in results.items() if v != "ok"}
    if not bad:
        row.shapes = "all configs run on meta"
    elif results.get("seed0") != "ok":
        row.shapes = f"meta cannot tell ({results.get('seed0')})"
    else:
        row.shapes = "FAILS on meta: " + "; ".join(f"{k}: {v}" for k, v in bad.items())


def evaluate_kernels(checkout: Path, targets: tuple[str, ...] = ("upstream", "built-in"), timing: bool = True,
                     jobs: int = 1, only: str = "", timeout_s: float | None = None) -> list[dict]:
    """Each published robust-kbench kernel, unmodified, on the upstream task and on kbench's built-in task
    (`jobs` evaluations at a time: each builds in its own jailed compiler and judges in its own process).
    `timeout_s` is the judge's own deadline: a kernel still running then gets the judge's verdict for it."""
    from concurrent.futures import ThreadPoolExecutor

    from engine.candidates import load_candidate
    from engine.pipeline.eval_types import EvalOptions
    from engine.pipeline.evaluate import evaluate

    builtin = set(builtin_task_names())
    work = []
    for kernel in sorted((checkout / "highlighted").glob("*/*/kernel.cu")):
        task_name, direction = kernel.parent.parent.name, kernel.parent.name
        if only not in str(kernel):
            continue
        if "upstream" in targets:
            work.append((kernel, task_name, direction, "upstream", checkout / "tasks" / task_name))
        if "built-in" in targets and task_name in builtin:
            work.append((kernel, task_name, direction, "built-in", task_name))

    def one(item: tuple) -> dict:
        kernel, task_name, direction, where, ref = item
        entry: dict = {"kernel": f"{task_name}/{direction}", "task": where}
        try:
            task = load_task(ref)
            if direction not in task.directions:
                entry["verdict"] = f"the task has no {direction} direction"
                return entry
            opts = EvalOptions(trials=1, profile=False, timing=timing, baselines=("eager",))
            if timeout_s is not None:
                opts = replace(opts, timeout_s=timeout_s)
            rep = evaluate(task, load_candidate(kernel), direction, opts)
        except Exception as exc:  # noqa: BLE001
            entry["verdict"] = f"error: {type(exc).__name__}: {str(exc)[:300]}"
            return entry
        entry["passed"] = rep.passed
        entry["verdicts"] = {v.stage: f"{v.status.value}: {v.reason}"[:300] for v in rep.verdicts}
        entry["failed_configs"] = [r.name for r in rep.rows if r.correct is False]
        entry["speedup_eager"] = rep.geomean_speedup_eager
        # by default the task's `bench` and `timed` configs (upstream's single settings), else every config
        entry["timed_configs"] = [r.name for r in rep.rows if r.candidate_ms is not None]
        bad = "; ".join(f"{v.stage} {v.status.value}: {v.reason[:160]}" for v in rep.verdicts
                        if v.status.value not in ("pass", "skipped"))
        print(f"  {entry['kernel']:<32} on {where:<9} passed={rep.passed} "
              f"speedup={rep.geomean_speedup_eager} {bad}", file=sys.stderr, flush=True)
        return entry

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        return list(pool.map(one, work))


def print_table(rows: list[Row]) -> None:
    print("| source | task | loads | directions | configs | check-task | shapes | notes / error |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        what = r.error if not r.loads else "; ".join(r.notes)
        what = what.replace("|", "\\|").replace("\n", " ")
        print(f"| {r.source} | {r.name} | {'yes' if r.loads else 'NO'} | {'+'.join(r.directions) or '-'} | "
              f"{r.configs or '-'} | {r.check or '-'} | {r.shapes.replace('|', '/') or '-'} | {what[:300]} |")


def summarise(rows: list[Row]) -> list[str]:
    lines = []
    for source in dict.fromkeys(r.source for r in rows):
        group = [r for r in rows if r.source == source]
        ok = sum(r.loads for r in group)
        line = f"{source}: {ok}/{len(group)} load"
        if any(r.shapes for r in group):
            meta = sum(r.shapes == "all configs run on meta" for r in group)
            fails = [r.name for r in group if r.shapes.startswith("FAILS")]
            unknown = sum(r.shapes.startswith(("meta cannot", "import failed")) for r in group)
            line += (f"; on meta tensors every config runs for {meta}, the odd-size variant fails for "
                     f"{len(fails)}{' (' + ', '.join(fails) + ')' if fails else ''}, {unknown} cannot be run on meta")
        lines.append(line)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--check-task", action="store_true", help="run kbench check-task on each task that loads")
    ap.add_argument("--eval", action="store_true", help="evaluate robust-kbench's published kernels (GPU)")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when visible)")
    ap.add_argument("--all", action="store_true", help="robust-kbench: also tasks/kernelbench/**")
    ap.add_argument("--shapes", action="store_true",
                    help="KernelBench: run every config's Model and inputs on meta tensors (shapes only)")
    ap.add_argument("--only", default="", help="only tasks whose path contains this text")
    ap.add_argument("--quiet", action="store_true", help="only the summary, not the table")
    ap.add_argument("--json", default=None, help="write the rows (and eval results) as JSON here")
    ap.add_argument("--targets", default="upstream,built-in",
                    help="--eval: on the upstream task folders, kbench's built-in tasks, or both")
    ap.add_argument("--no-timing", action="store_true", help="--eval: correctness and integrity only")
    ap.add_argument("--jobs", type=int, default=1, help="--eval: evaluations at a time")
    ap.add_argument("--timeout", type=float, default=None,
                    help="--eval: the judge's deadline per evaluation in seconds (default: kbench's own)")
    args = ap.parse_args()
    path = args.path.resolve()
    layout = find_layout(path)
    items = robust_kbench_folders(path, args.all) if layout == "robust-kbench" else kernelbench_files(path)
    items = [(s, p) for s, p in items if args.only in str(p)]
    rows = []
    for source, item in items:
        row = load_row(source, item)
        if row.loads and args.check_task:
            print(f"  check-task {row.name} ...", file=sys.stderr, flush=True)
            check_row(row, args.device or "cpu")
        if row.loads and args.shapes and layout == "kernelbench":
            shapes_row(row)
        rows.append(row)
    if not args.quiet:
        print_table(rows)
        print()
    for line in summarise(rows):
        print(line)
    evals = evaluate_kernels(path, tuple(args.targets.split(",")), not args.no_timing, args.jobs,
                             args.only, args.timeout) \
        if args.eval and layout == "robust-kbench" else []
    if evals:
        print("\n| kernel | on | passed | eager speedup | verdicts |")
        print("| --- | --- | --- | --- | --- |")
        for e in evals:
            verdicts = e.get("verdict") or "; ".join(f"{k} {v}" for k, v in e.get("verdicts", {}).items())
            sp = e.get("speedup_eager")
            print(f"| {e['kernel']} | {e['task']} | {e.get('passed', '-')} | "
                  f"{f'{sp:.2f}x' if sp else '-'} | {verdicts.replace('|', '/')[:400]} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": [asdict(r) for r in rows], "eval": evals}, indent=1))
    return 1 if any(r.must_load and not r.loads for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
