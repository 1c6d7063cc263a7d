"""`kbench eval`'s command line, read twice: by the full parser (engine/cli/cmd_eval.py registers these arguments),
and first of all by `begin`, before the CLI imports the rest of itself, to start the evaluation's judge
(engine/pipeline/early_judge.py) while the CLI loads its modules, the task and the build cache. The same
`add_arguments` serves both, so they cannot read `--gpu` differently.

`begin` never fails a command: a command line it cannot read (another command, a mistake the full parser will
report, `--help`) starts nothing, and so does any trouble starting the judge (the evaluation then starts one as
before, and reports the trouble if it is real)."""

from __future__ import annotations

import argparse
import sys

from engine.cli.eval_flags import add_evaluation_flags
from engine.config.sections import MODE_TRIALS
from engine.pipeline.early_judge import EarlyJudge, process_start, start_early
from engine.pipeline.eval_types import default_cache_root


class _Unread(Exception):
    """The command line is not one `begin` acts on."""


class _Reader(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override] - argparse's would print and exit
        raise _Unread(message)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("task", help="built-in task name, task folder, or KernelBench .py")
    p.add_argument("candidate", help="native folder (kernel.cu + binding.cpp), kernel-only kernel.cu (its binding "
                                     "generated from the task signature: `kbench glue TASK`), robust-kbench .cu, or "
                                     "ModelNew .py")
    p.add_argument("--backward", action="store_true", help="evaluate the backward direction")
    p.add_argument("--config", action="append", dest="configs", metavar="NAME", help="only this config (repeatable)")
    p.add_argument("--upstream", action="store_true",
                   help="evaluate as robust-kbench / KernelBench do, for numbers comparable with their results: "
                        f"their settings modes, {MODE_TRIALS['upstream']} trials, every config timed, --use_fast_math (robust-kbench), "
                        "torch's default precision (default: [eval] mode, else kbench's stricter evaluation)")
    p.add_argument("--no-timing", action="store_true", help="check correctness only")
    add_evaluation_flags(p)     # --trials, --timeout, --time-config, ... and the timing loop's (eval_flags.py)
    prof = p.add_mutually_exclusive_group()
    prof.add_argument("--profile", action="store_true",
                      help="after the verdict is printed, profile a passing candidate (ncu + torch profiler, as "
                           "`kbench profile`); off by default")
    prof.add_argument("--no-profile", action="store_true", help="no profile stage (the default; kept for scripts)")
    p.add_argument("--fresh-baselines", action="store_true",
                   help="time eager and torch.compile again instead of reusing this GPU's cached figures (they "
                        "are reused only after a quick re-timing agrees within 10%%); the new figures are kept")
    p.add_argument("--gpu", type=int, default=None, help="GPU index to pin the evaluation to")
    p.add_argument("--override-static", action="store_true",
                   help="a person's override: go on past a static `fail` (the verdict then says overridden)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def begin(argv: list[str] | None = None) -> EarlyJudge | None:
    """The judge of a `kbench eval` command line, started now; None for any other command line."""
    origin = process_start()
    argv = sys.argv[1:] if argv is None else list(argv)
    if "eval" not in argv or "-h" in argv or "--help" in argv:
        return None
    reader = _Reader(add_help=False)
    reader.add_argument("--workspace")
    sub = reader.add_subparsers(dest="command")
    add_arguments(sub.add_parser("eval", add_help=False))
    try:
        args, _ = reader.parse_known_args(argv)
    except _Unread:
        return None
    if args.command != "eval":
        return None
    try:
        return start_early(args.gpu, default_cache_root(), origin)
    except Exception:  # noqa: BLE001 - e.g. no toolchain: the evaluation meets it again and says so
        return None
