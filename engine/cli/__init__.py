"""The headless command line. Each `cmd_*` module registers its own subcommands.

Lazy imports: every command, `kbench --help` included, loads all the `cmd_*` modules at start-up, and most
commands need a small part of the engine. So a `cmd_*` module imports at its top what start-up loads anyway, and
the rest (the session service, the task catalog, the evolve package...) inside the commands that use it, under a
`Lazy imports:` paragraph of its own. This module imports nothing lazily.

Before any of that, `main` reads an `eval` command line (engine/cli/eval_start.py) and starts its judge, so that
the judge's start overlaps the parser's imports, the task and the build."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

from engine.cli import eval_start
from engine.config.env import env_raw
from engine.errors import KbenchError, TaskWarning, storage_error
from engine.jail.limits import check_override
from engine.pipeline.early_judge import CLOSE_GRACE_S, EarlyJudge

# One module per group of commands; each exposes register(subparsers) and sets `func` on its parsers.
COMMAND_MODULES = (
    "engine.cli.cmd_tasks",
    "engine.cli.cmd_eval",
    "engine.cli.cmd_glue",
    "engine.cli.cmd_roofline",
    "engine.cli.cmd_judges",
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
                        help="the workspace repository (default: $KBENCH_WORKSPACE, else ./workspace)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("tui", help="open the interactive app (the default when no command is given)")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _print_task_warnings() -> None:
    """A TaskWarning (a task that loads but breaks a documented rule) as one `kbench: warning:` line on stderr,
    once per task and message; every other warning keeps Python's own format."""
    warnings.simplefilter("default", TaskWarning)
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001 - warnings' signature
        if issubclass(category, TaskWarning):
            print(f"kbench: warning: {message}", file=sys.stderr, flush=True)
            return
        shown(message, category, filename, lineno, file, line)
    warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    early: EarlyJudge | None = None
    interrupted = False
    try:
        # `kbench eval`'s judge starts first, so that its start overlaps everything below (engine/cli/eval_start.py)
        early = eval_start.begin(argv)
        return _main(argv, early)
    except KeyboardInterrupt:      # before the command ran (starting the judge, the parser's imports)
        interrupted = True
        print("kbench: interrupted", file=sys.stderr)
        return 130
    finally:
        if early is not None:      # a judge never handed its request (bad input, a failed build, a Ctrl-C)
            early.close(grace_s=0.0 if interrupted or early.interrupted else CLOSE_GRACE_S)


def _main(argv: list[str] | None, early: EarlyJudge | None) -> int:
    _print_task_warnings()
    if bad := check_override(env_raw("KBENCH_JAIL_LIMITS")):
        print(f"kbench: warning: {bad}; those limits keep their defaults", file=sys.stderr)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    args.early_judge = early
    try:
        return int(args.func(args) or 0)
    except KbenchError as exc:
        print(f"kbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if early is not None:
            early.interrupted = True
        print("kbench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _reader_went_away()
    except OSError as exc:
        failure = storage_error(exc)     # a full or read-only disk under any command: one line, not a traceback
        if failure is None:
            raise
        print(f"kbench: error: {failure}", file=sys.stderr)
        return 2


def _reader_went_away() -> int:
    """stdout's reader closed the pipe (`kbench show X --json | head -5`): stop quietly, as a tool killed by
    SIGPIPE would, and point stdout at /dev/null so the interpreter's last flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141   # 128 + SIGPIPE, what the shell reports for `yes | head -1`


if __name__ == "__main__":
    sys.exit(main())
