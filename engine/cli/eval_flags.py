"""The evaluation flags `kbench eval`, `kbench evolve` and `kbench reevaluate` share, and what each stands for in
the config: every one of them is a key of `[eval]` or `[timing]` (engine.config.sections), merged into the config by
engine.config.load.load_config as the "flags" layer, so that a flag overrides the user's and the workspace's files the
same way on every command, and engine.pipeline.eval_types.options_from_config turns the result into EvalOptions.

The help texts name their defaults from the config's own dataclass defaults (EvalConfig, TimingParams, MODE_TRIALS), not from
copies of them, so the commands cannot document different defaults.

Light on purpose: `kbench eval` reads its command line through these before the CLI imports the rest of itself
(engine/cli/eval_start.py), so this module imports only engine.config (which loads no pydantic)."""

from __future__ import annotations

import argparse
from typing import Any

from engine.config.sections import EvalConfig, MODE_TRIALS, TimingParams

_EVAL = EvalConfig()
_TIMING = TimingParams()


def add_evaluation_flags(p: argparse.ArgumentParser) -> None:
    """The flags over `[eval]` and `[timing]` (their default None, or False for switches: the config decides)."""
    p.add_argument("--trials", type=int, default=None, metavar="N",
                   help=f"fresh-seed correctness trials per config (default: [eval] trials, else "
                        f"{MODE_TRIALS['kbench']}; {MODE_TRIALS['upstream']} in the upstream mode, as robust-kbench "
                        "and KernelBench)")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help=f"seconds before one evaluation is killed (default: [eval] timeout_s, else "
                        f"{_EVAL.timeout_s:g})")
    p.add_argument("--no-compile-baseline", action="store_true",
                   help="time against eager only, not torch.compile (faster; default: [eval] compile_baseline, "
                        f"else {'on' if _EVAL.compile_baseline else 'off'})")
    p.add_argument("--time-config", action="append", dest="timing_configs", metavar="NAME",
                   help="time only this config (repeatable), or `all` for every config; correctness still runs on "
                        "every selected config. Default: [eval] timing_configs, else `bench` and the configs tagged "
                        "`timed` (every config where the task has neither)")
    p.add_argument("--library-policy", choices=["pure", "engineering"], default=None,
                   help="vendor libraries and ATen: pure (not allowed) or engineering (allowed, tagged on each "
                        "candidate); default: [eval] library_policy, else the task's, else pure")
    t = p.add_argument_group("the timing loop (the config's [timing] section; kbench's compiled helper runs it)")
    t.add_argument("--warmup", type=int, default=None, metavar="N",
                   help=f"untimed calls before the timed ones (default: [timing] warmup, else {_TIMING.warmup})")
    t.add_argument("--min-iters", type=int, default=None, metavar="N",
                   help=f"at least this many timed calls (default: [timing] min_iters, else {_TIMING.min_iters})")
    t.add_argument("--max-iters", type=int, default=None, metavar="N",
                   help=f"at most this many timed calls (default: [timing] max_iters, else {_TIMING.max_iters})")
    t.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="timed calls of one callable fill about this long, within the bounds above (default: "
                        f"[timing] budget_s, else {_TIMING.budget_s:g})")
    t.add_argument("--timing-checks", type=int, default=None, metavar="N",
                   help="timed calls, drawn at random, whose outputs the judge checks (at least 1; default: "
                        f"[timing] checks, else {_TIMING.checks})")
    t.add_argument("--no-flush-l2", action="store_true",
                   help="time with a warm L2: no flush before each call (default: [timing] flush_l2, else "
                        f"{'flushed' if _TIMING.flush_l2 else 'not flushed'})")


def evaluation_config_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The flags of `add_evaluation_flags` as dotted config keys for load_config (None: not given)."""
    flags: dict[str, Any] = {"eval.trials": args.trials, "eval.timeout_s": args.timeout,
                             "eval.timing_configs": args.timing_configs, "eval.library_policy": args.library_policy}
    if args.no_compile_baseline:
        flags["eval.compile_baseline"] = False
    flags.update({"timing.warmup": args.warmup, "timing.min_iters": args.min_iters, "timing.max_iters": args.max_iters,
                  "timing.budget_s": args.time_budget, "timing.checks": args.timing_checks})
    if args.no_flush_l2:
        flags["timing.flush_l2"] = False
    return flags
