"""`kbench judges [--stop]`: the judges kept for the next `kbench eval` (engine/pipeline/kept_judge.py), and a way
to end them now rather than at the end of their idle time."""

from __future__ import annotations

import argparse
import json
import sys

from engine.pipeline.kept_judge import kept_now, kept_root, stop_kept


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("judges", help="list the judges kept up for the next `kbench eval` ([eval] keep_judge_s); "
                                      "--stop ends them")
    p.add_argument("--stop", action="store_true", help="end every kept judge now (its GPU memory is freed)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_judges)


def cmd_judges(args: argparse.Namespace) -> int:
    kept = kept_now()
    if args.stop:
        left = stop_kept(kept)
        for k in left:
            print(f"kbench: the keeper {k.pid} did not end within 10 s", file=sys.stderr)
        print(f"stopped {len(kept) - len(left)} kept judge{'s' if len(kept) - len(left) != 1 else ''}")
        return 1 if left else 0
    if args.json:
        print(json.dumps([k.__dict__ for k in kept], indent=2))
        return 0
    if not kept:
        print(f"no judge is kept (they live in {kept_root()})")
        return 0
    print(f"{'GPU':<8} {'state':<8} {'keeper':>8}  idle left")
    for k in kept:
        gpu = "default" if k.gpu is None else str(k.gpu)
        left = f"{k.left_s:.0f} s" if k.left_s is not None else "-"
        print(f"{gpu:<8} {k.state:<8} {k.pid:>8}  {left}")
    return 0
