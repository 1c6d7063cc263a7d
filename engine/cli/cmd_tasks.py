"""`kbench tasks` and `kbench show TASK`. `show` prints each config's FLOPs and bytes per direction: the task's cost
model, or where it has none (KernelBench problems, robust-kbench folders, user tasks) the reference's counted on
the meta device, marked "(counted)".

Lazy imports: the task catalog (engine.task_catalog) is imported by `kbench tasks`: every `kbench` command loads
this module at start-up."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TYPE_CHECKING

from engine.errors import KbenchError
from engine.tasks.loader import load_task
from engine.tasks.model import Cost, Task, scaled

if TYPE_CHECKING:
    from engine.harness.cost_count import Counted


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tasks", help="list the built-in tasks, then those in $KBENCH_TASKS, with their directions "
                                     "and config counts")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_tasks)
    p = sub.add_parser("show", help="show one task: description, signatures, tolerances, configs and costs")
    p.add_argument("task", help="built-in task name, task folder or KernelBench .py")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_show)


def cmd_tasks(args: argparse.Namespace) -> int:
    from engine.task_catalog import catalog

    rows, broken = [], []
    for entry in catalog():
        try:
            t = load_task(entry.path)
        except KbenchError as exc:
            broken.append((entry.name, str(exc)))
            continue
        rows.append({"name": entry.name, "directions": list(t.directions), "configs": len(t.configs),
                     "tags": list(t.tags), "baselines": [d for d in t.directions if t.baseline_dir(d)],
                     "builtin": entry.builtin, "path": str(entry.path)})
    if args.json:
        print(json.dumps({"tasks": rows, "broken": [{"name": n, "error": e} for n, e in broken]}, indent=2))
        return 1 if broken else 0
    width = max([len(r["name"]) for r in rows] + [4])
    print(f"{'task':<{width}}  {'directions':<18} {'configs':>7}  {'baselines':<18} tags")
    for r in rows:
        mine = "" if r["builtin"] else f"  ($KBENCH_TASKS: {r['path']})"
        print(f"{r['name']:<{width}}  {'+'.join(r['directions']):<18} {r['configs']:>7}  "
              f"{'+'.join(r['baselines']) or '-':<18} {', '.join(r['tags'])}{mine}")
    for name, err in broken:
        print(f"{name:<{width}}  BROKEN: {err}")
    return 1 if broken else 0


def counted_costs(t: Task) -> dict[str, dict[str, Counted | None]]:
    """Per config and direction without a cost model in the task: the reference's cost counted on the meta device
    (engine/harness/cost_count.py), None where it cannot run there."""
    from engine.harness.cost_count import counted_cost  # lazy: torch, for tasks without a cost model only
    from engine.harness.runtimes import runtime_for
    out: dict[str, dict[str, Counted | None]] = {}
    for d in t.directions:
        missing = [c for c in t.configs if d not in c.cost]
        runtime = runtime_for(t, d) if missing else None
        for c in missing:
            out.setdefault(c.name, {})[d] = counted_cost(runtime, c)
    return out


def _cost_text(d: str, k: Cost | None, counted: bool, note: str = "") -> str:
    if k is None:
        return f"{d}: cost unknown (the reference cannot be set up on the meta device)"
    return f"{d}: {scaled(k.flops, 'FLOP')}, {scaled(k.bytes, 'B')}" + (" (counted" if counted else "") + \
        (f"; {note}" if note else "") + (")" if counted else "")


def cmd_show(args: argparse.Namespace) -> int:
    t = load_task(args.task)
    counted = counted_costs(t)
    if args.json:
        print(json.dumps({**t.to_json(), "counted_costs": {
            name: {d: ({**dataclasses.asdict(k.cost), **({"note": k.note} if k.note else {})} if k else None)
                   for d, k in per.items()} for name, per in counted.items()}},
            indent=2))
        return 0
    print(f"{t.name}  ({t.format}, {t.dtype})  {t.root}")
    if t.description:
        print(f"  {t.description}")
    if t.tags:
        print(f"  tags: {', '.join(t.tags)}")
    for d, spec in t.directions.items():
        base = t.baseline_dir(d)
        print(f"\n[{d}]  atol={spec.tolerance.atol:g} rtol={spec.tolerance.rtol:g}"
              f"  baseline: {base if base else 'none'}")
        print(f"  {spec.signature}")
    print(f"\nconfigs ({len(t.configs)}):")
    for c in t.configs:
        costs = "  ".join([_cost_text(d, k, False) for d, k in c.cost.items()]
                          + [_cost_text(d, k.cost if k else None, True, k.note if k else "")
                             for d, k in counted.get(c.name, {}).items()])
        args_ = ", ".join(f"{k}={v}" for k, v in {**c.model_kwargs, **c.input_kwargs}.items())
        tags = f"  [{', '.join(c.tags)}]" if c.tags else ""
        print(f"  {c.name:<20} {args_}  init={c.init} seed={c.seed}{tags}  {costs}".rstrip())
    if t.notes:
        print("\nnotes:")
        for n in t.notes:
            print(f"  - {n}")
    return 0
