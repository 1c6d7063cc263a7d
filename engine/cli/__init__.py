"""The headless command line. Each `cmd_*` module registers its own subcommands."""

from __future__ import annotations

import argparse
import importlib
import sys

from engine.errors import KbenchError

# One module per group of commands; each exposes register(subparsers) and sets `func` on its parsers.
COMMAND_MODULES = (
    "engine.cli.cmd_tasks",
    "engine.cli.cmd_eval",
    "engine.cli.cmd_roofline",
    "engine.cli.cmd_workspace",
    "engine.cli.cmd_fsck",
    "engine.cli.cmd_evolve",
    "engine.cli.cmd_export",
    "engine.cli.cmd_check_task",
    "engine.cli.cmd_profile",
    "engine.cli.cmd_report",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kbench",
        description="Translate PyTorch into CUDA kernels, verify them, evolve faster ones; every candidate a git commit.",
    )
    parser.add_argument("--workspace", metavar="PATH", default=None,
                        help="the workspace repository (default: ./workspace)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("tui", help="open the interactive app (the default when no command is given)")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KbenchError as exc:
        print(f"kbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
