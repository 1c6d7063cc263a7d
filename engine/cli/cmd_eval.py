"""`kbench eval TASK CANDIDATE [--backward] [--json]`: compile, check every config, time.

The eager and torch.compile baselines come from the disk cache where an earlier `kbench eval` measured them on
this GPU and a quick re-timing agrees (engine/pipeline/baseline_cache.py; `--fresh-baselines` measures them
again). The profile stage is not run unless asked for (`--profile`), and then only after the verdict is shown."""

from __future__ import annotations

import argparse
import json
import sys

from engine.cli.common import check_config_names, workspace_path
from engine.cli.eval_flags import evaluation_config_flags
from engine.cli.eval_start import add_arguments
from engine.config.load import load_config
from engine.eval_records import record
from engine.pipeline import eval_mode
from engine.pipeline.baseline_cache import FRESH, USE
from engine.pipeline.early_judge import helper_timer
from engine.pipeline.eval_types import EvalOptions, options_from_config
from engine.pipeline.evaluate import evaluate, profile_after
from engine.pipeline.kept_judge import keep_for_next, keep_seconds
from engine.pipeline.report import render, render_profile
from engine.tasks.glue.generated import load_for_task
from engine.tasks.loader import load_task


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a candidate: compile, correctness on every config, timing",
                       description="Exit code 0 only when the candidate passes (engine.verdict.judge: it compiles, "
                       "passes every config, and no stage fails or is suspicious); 3 when it compiled but "
                       "correctness could not be checked (no GPU); 1 otherwise.")
    add_arguments(p)
    p.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    task = load_task(args.task)
    direction = "backward" if args.backward else "forward"
    task.spec(direction)                       # a missing direction is bad input, before any compile
    check_config_names(task, args.configs, "--config")
    check_config_names(task, args.timing_configs, "--time-config", allow_all=True)
    opts = eval_options(args)                  # a bad config file or flag value is bad input, before any compile
    candidate = load_for_task(args.candidate, task, direction)   # kernel-only: binding.cpp generated here
    # what the mode will run, said before the build (a machine without a GPU stops after it)
    planned = eval_mode.plan(task, direction, opts.mode, opts.configs, opts.timing_configs, opts.trials)
    if opts.mode != eval_mode.KBENCH and not args.json:
        print(planned.describe(), file=sys.stderr, flush=True)
    quiet = args.json
    say = None if quiet else (lambda m: print(f"… {m}", file=sys.stderr, flush=True))
    early = getattr(args, "early_judge", None)   # started as the command began (eval_start.py); main() closes it
    report = evaluate(task, candidate, direction, opts, progress=say, early=early)
    if not args.json:
        print(render(report), flush=True)     # the verdict first: the profile (if asked for) takes a while
    _keep_for_export(report, task, direction, candidate, opts, quiet)
    if args.profile:
        if not profile_after(report, task, candidate, direction, opts, say):
            print("kbench: no profile: only a candidate that passes with its timing is profiled", file=sys.stderr)
        elif not args.json:
            print(render_profile(report, verdict=True))
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    _keep_a_judge(report, opts, args.gpu, quiet)
    j = report.judgement
    if j.passed:
        return 0
    return 3 if j.not_checked else 1


def eval_options(args: argparse.Namespace) -> EvalOptions:
    """This command's EvalOptions: the same config as every session's (the user's file, the workspace's, then the
    flags that stand for its keys), through the one builder (engine.pipeline.eval_types.options_from_config); the
    rest is what only this run decides."""
    flags = evaluation_config_flags(args)
    if args.upstream:
        flags["eval.mode"] = eval_mode.UPSTREAM
    config = load_config(workspace_path(args), flags)
    return options_from_config(config, configs=args.configs, timing=not args.no_timing, gpu=args.gpu, profile=False,
                               baseline_cache=FRESH if args.fresh_baselines else USE,
                               override_static=args.override_static)


def _keep_for_export(report, task, direction: str, candidate, opts: EvalOptions, quiet: bool) -> None:
    """Record what this evaluation found (engine.eval_records), so `kbench export --from-dir` can rely on it."""
    try:
        rec = record(report, task, direction, candidate, opts.cache_root, subset=bool(opts.configs))
    except OSError as exc:
        print(f"kbench: warning: the verdict could not be recorded for export ({exc})", file=sys.stderr)
        return
    if rec is not None and not quiet:
        print(f"verdict recorded for `kbench export --from-dir`: {rec.summary}", file=sys.stderr)


def _keep_a_judge(report, opts: EvalOptions, gpu: int | None, quiet: bool) -> None:
    """After an evaluation that reached a judge, leave one up for the next `kbench eval` on this GPU
    (engine/pipeline/kept_judge.py), and say so: a process that outlives the command is never a surprise."""
    idle_s = keep_seconds(opts.keep_judge_s)
    if "judge" not in report.phases or idle_s <= 0 or (timer := helper_timer(opts.cache_root)) is None:
        return
    try:
        started = keep_for_next(timer, gpu, idle_s)
    except OSError:              # a full or read-only home: the next command starts its own judge
        return
    if started and not quiet:
        print(f"… a judge stays up {idle_s:.0f} s for the next `kbench eval` on this GPU "
              "([eval] keep_judge_s = 0: none)", file=sys.stderr)
