"""`kbench glue TASK [--backward] [--lang cuda|triton] [--binding]`: the launcher a kernel-only candidate defines,
and the binding.cpp kbench generates for it from the task's signature (engine/tasks/glue/generated.py); with `--lang
triton`, the kernel.py skeleton of a Triton candidate and its generated binding.py (engine/tasks/glue/triton.py)."""

from __future__ import annotations

import argparse
import json

from engine.tasks.glue.abi import GlueError, launcher_abi
from engine.tasks.glue.generated import refusal
from engine.tasks.glue.text import binding_text, header_text
from engine.tasks.glue.triton import binding_py_text, py_declaration, skeleton_text
from engine.tasks.loader import builtin_task_names, load_task


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("glue", help="print the launcher ABI a kernel-only candidate (kernel.cu alone) defines for a "
                                    "task, or the binding.cpp kbench generates for it",
                       description="A kernel-only candidate is a kernel.cu (plus headers) without binding.cpp: it "
                                   "defines the launcher printed here and kbench generates binding.cpp from the task's "
                                   "signature. Exit 2 when the signature cannot be expressed (the reason is printed).")
    p.add_argument("task", help="built-in task name, task folder or KernelBench .py; `all`: which built-in task "
                                "directions have generated glue")
    direction = p.add_mutually_exclusive_group()
    direction.add_argument("--direction", choices=["forward", "backward"], default=None,
                           help="the direction (default forward)")
    direction.add_argument("--backward", action="store_true", help="the backward direction (--direction backward)")
    p.add_argument("--lang", choices=["cuda", "triton"], default="cuda",
                   help="cuda (default): the kb_<direction> declaration kernel.cu defines; triton: the kernel.py "
                        "skeleton a Triton candidate fills in (its launcher has the same parameters, as Python values)")
    p.add_argument("--binding", action="store_true", help="print the generated binding (binding.cpp, or binding.py "
                                                          "with --lang triton) instead of the header")
    p.add_argument("--json", action="store_true", help="print the ABI (declaration, header, binding) as JSON")
    p.set_defaults(func=cmd_glue)


def cmd_glue(args: argparse.Namespace) -> int:
    if args.task == "all":
        return _all(args.json)
    task = load_task(args.task)
    direction = "backward" if args.backward else (args.direction or "forward")
    task.spec(direction)                       # a missing direction is bad input
    try:
        abi = launcher_abi(task, direction)
    except GlueError as exc:                   # bad input (exit 2), naming what cannot be expressed
        raise GlueError(f"task {task.name} ({direction}) has no generated glue, so no kernel-only candidates: "
                        f"{exc}") from None
    if args.lang == "triton":
        header, binding, declaration = skeleton_text(abi, task.name), binding_py_text(abi), py_declaration(abi)
    else:
        header, binding, declaration = header_text(abi, task.name), binding_text(abi), abi.declaration()
    if args.json:
        print(json.dumps({"task": task.name, "direction": direction, "lang": args.lang, "signature": abi.signature,
                          "launcher": abi.launcher, "declaration": declaration,
                          "dims": [d for d, _ in abi.dims], "header": header, "binding": binding}, indent=2))
    else:
        print(binding if args.binding else header, end="")
    return 0


def _all(as_json: bool) -> int:
    rows = []
    for name in builtin_task_names():
        task = load_task(name)
        for direction in task.directions:
            rows.append({"task": name, "direction": direction, "refused": refusal(task, direction)})
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(f"{r['task']} {r['direction']}") for r in rows) if rows else 0
    for r in rows:
        label = f"{r['task']} {r['direction']}"
        print(f"{label:<{width}}  " + (f"refused: {r['refused']}" if r["refused"] else f"kb_{r['direction']}"))
    return 0
