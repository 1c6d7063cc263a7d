"""`kbench fsck`: check the workspace (every session's refs, notes and records, and git's own fsck), repair
what is safe, name what it will not touch. Exit 0 when nothing is left to fix, 1 otherwise."""

from __future__ import annotations

import argparse
import json

from engine.cli.common import WORKSPACE_HELP, workspace_path
from engine.workspace import Workspace
from engine.workspace.fsck import DAMAGED, REPAIRED, WARNING, fsck

LABEL = {"ok": "ok", REPAIRED: "repaired", DAMAGED: "DAMAGED", WARNING: "warning", "note": "note"}


def register(sub: argparse._SubParsersAction) -> None:
    help = "check the workspace against itself and git fsck; repair what is safe, name what it will not touch"
    p = sub.add_parser("fsck", help=help, description=help + ". Repairs: the listing cache, a session branch "
                       "that is not at the session's best, writer records of processes that are gone. Never "
                       "touched: objects, candidate refs, notes, git's own *.lock files.")
    p.add_argument("--workspace", metavar="PATH", default=argparse.SUPPRESS,
                   help=WORKSPACE_HELP)
    p.add_argument("--dry-run", action="store_true", help="report only; repair nothing")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_fsck)


def cmd_fsck(args: argparse.Namespace) -> int:
    with Workspace.open(workspace_path(args)) as ws:
        report = fsck(ws, dry_run=args.dry_run)
    if args.json:
        print(json.dumps({"workspace": str(report.workspace), "clean": report.clean,
                          "findings": [f.__dict__ for f in report.findings]}, indent=2))
        return 0 if report.clean else 1
    print(f"kbench fsck {report.workspace}")
    for f in report.findings:
        print(f"  {LABEL.get(f.level, f.level):<9} {f.subject}: {f.text}")
    left, fixed = len(report.problems), len(report.repaired)
    if left:
        print(f"{left} problem(s) left{f', {fixed} repaired' if fixed else ''}: see the lines above for what to do")
        return 1
    print(f"clean{f' ({fixed} repaired)' if fixed else ''}")
    return 0
