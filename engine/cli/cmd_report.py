"""`kbench report SESSION [--out FILE.md]`: the session's results, read from the workspace only.

Lazy imports: engine.profile.session_report, only for this command: every `kbench` command loads this module at
start-up."""

from __future__ import annotations

import argparse
import json

from engine.cli.common import workspace_path
from engine.workspace import Workspace


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="a session's report: validity, speedups, fast_p, generations, LLM cost, time",
                       description="Markdown on stdout, or to FILE.md with the plot of best and median speedup "
                                   "per generation beside it (FILE.png; drawn with matplotlib: "
                                   "pip install 'kbench[plot]').")
    p.add_argument("session", help="session name")
    p.add_argument("--out", metavar="FILE.md", default=None, help="write the markdown here (and FILE.png)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from engine.profile.session_report import build_report, to_markdown, write_report

    ws = Workspace.open(workspace_path(args))
    try:
        rep = build_report(ws, args.session)
    finally:
        ws.close()
    if args.json:
        print(json.dumps(rep.to_json(), indent=2))
    elif args.out:
        written = write_report(rep, args.out)
        print(f"wrote {written.markdown}"
              + (f" and {written.plot}" if written.plot else f" (no plot: {written.no_plot})"))
    else:
        print(to_markdown(rep))
    return 0
