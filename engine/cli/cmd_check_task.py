"""`kbench check-task TASK`: flag configs whose reference outputs are degenerate (engine.integrity.check_task).

Lazy imports: the check (engine.integrity.check_task) is imported by the command: every `kbench` command loads
this module at start-up."""

from __future__ import annotations

import argparse
import json
import sys

from engine.cli.common import check_config_names
from engine.tasks.loader import builtin_task_names, load_task


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check-task", help="flag configs a trivial kernel could pass: near-constant, near-zero, or "
                                          "insensitive to the inputs or the initialisation (over several seeds)")
    p.add_argument("task", help="built-in task name, task folder or KernelBench .py; `all` for every built-in task")
    p.add_argument("--seeds", type=int, default=3, help="seeds per config (default 3)")
    p.add_argument("--direction", action="append", default=None, help="only this direction (repeatable)")
    p.add_argument("--config", action="append", default=None, help="only this config (repeatable)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when visible, else cpu)")
    p.add_argument("--cpu-all", action="store_true", help="on a CPU, check the large configs too")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check_task)


def cmd_check_task(args: argparse.Namespace) -> int:
    """Exit 0: every config checked and none degenerate (some may be skipped); 1: a degenerate config, or a
    reference that raised; 3: nothing was checked at all (every config skipped: say so, never "no degenerate
    config")."""
    names = builtin_task_names() if args.task == "all" else [args.task]
    tasks = [load_task(name) for name in names]      # bad input is one line, before anything is started
    for task in tasks:
        check_config_names(task, args.config, "--config")
    if not args.json:
        print("  starting torch", file=sys.stderr, flush=True)    # seconds on a loaded machine
    from engine.integrity.check_task import check_task

    report, all_rows = {}, []
    for task in tasks:
        say = None if args.json else (lambda m: print(f"  checking {m}", file=sys.stderr, flush=True))
        rows = check_task(task, seeds=args.seeds, device=args.device, directions=args.direction,
                          configs=args.config, cpu_all=args.cpu_all, progress=say)
        report[task.name] = [r.to_json() for r in rows]
        all_rows += rows
        if not args.json:
            print(f"{task.name}:")
            for r in rows:
                _print_row(r)
    summary, code = _summary(all_rows)
    if args.json:
        print(json.dumps({"tasks": report, "degenerate": sum(r.degenerate for r in all_rows),
                          "errors": sum(bool(r.error) for r in all_rows),
                          "checked": sum(r.checked for r in all_rows), "summary": summary}, indent=2))
    else:
        print(summary)
    return code


def _print_row(r) -> None:
    if r.error:
        print(f"  {r.direction:<8} {r.config:<22} NOT CHECKED: {r.error}")
        return
    if r.skipped:
        print(f"  {r.direction:<8} {r.config:<22} skipped: {r.skipped}")
        return
    stats = (f"std {r.std:.3g}" if r.std is not None else "std -") + \
            f"  near-zero {r.frac_near_zero:.3f}" + \
            f"  d/input {r.input_sensitivity:.3g}" + \
            (f"  d/init {r.init_sensitivity:.3g}" if r.init_sensitivity is not None else "  d/init -") + \
            (f"  vacuous {r.vacuous:.2f}" if r.vacuous is not None else "") + \
            (f"  ref-err {r.ref_error:.2g}" if r.ref_error is not None else "  ref-err -")
    state = "DEGENERATE: " + "; ".join(r.flags) if r.flags else "ok"
    print(f"  {r.direction:<8} {r.config:<22} {stats}  [{r.device}, {r.seeds} seeds]  {state}")
    for w in r.warnings:
        print(f"  {'':<8} {'':<22} warning: {w}")


def _summary(rows: list) -> tuple[str, int]:
    bad = sum(r.degenerate for r in rows)
    errors = [r for r in rows if r.error]
    checked = sum(r.checked for r in rows)
    skipped = sum(bool(r.skipped) for r in rows)
    tail = f" ({checked} checked, {skipped} skipped)" if skipped else ""
    if bad or errors:
        parts = [f"{bad} degenerate config(s)"] if bad else []
        if errors:
            parts.append(f"the reference raised on {len(errors)} config(s), which were not checked "
                         f"(first: {errors[0].config}: {errors[0].error})")
        return "; ".join(parts) + tail, 1
    if not checked:
        return (f"nothing was checked: all {len(rows)} config(s) were skipped (see above); "
                "no verdict on degenerate configs"), 3
    return "no degenerate config" + tail, 0
