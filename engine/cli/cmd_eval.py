"""`kbench eval TASK CANDIDATE [--backward] [--json]`: compile, check every config, time.

The eager and torch.compile baselines come from the disk cache where an earlier `kbench eval` measured them on
this GPU and a quick re-timing agrees (engine/pipeline/baseline_cache.py; `--fresh-baselines` measures them
again). The profile stage is not run unless asked for (`--profile`), and then only after the verdict is shown."""

from __future__ import annotations

import argparse
import json
import sys

from engine.cli.common import check_config_names
from engine.cli.eval_start import add_arguments
from engine.config import ConfigError, load_config
from engine.eval_records import record
from engine.pipeline import eval_mode
from engine.pipeline.baseline_cache import FRESH, USE
from engine.pipeline.evaluate import EvalOptions, evaluate, profile_after
from engine.pipeline.report import render, render_profile
from engine.tasks.glue import load_for_task
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
    candidate = load_for_task(args.candidate, task, direction)   # kernel-only: binding.cpp generated here
    cfg = load_config(None).eval
    policy = args.library_policy if args.library_policy is not None else cfg.library_policy
    mode = eval_mode.UPSTREAM if args.upstream else cfg.mode
    trials = args.trials if args.trials is not None else cfg.trials
    if trials is not None and trials < 1:
        raise ConfigError(f"--trials must be at least 1, got {trials}")
    # what the mode will run, said before the build (a machine without a GPU stops after it)
    planned = eval_mode.plan(task, direction, mode, args.configs, args.timing_configs, trials)
    if mode != eval_mode.KBENCH and not args.json:
        print(planned.describe(), file=sys.stderr, flush=True)
    opts = EvalOptions(configs=args.configs, timing_configs=args.timing_configs, trials=trials, mode=mode,
                       timing=not args.no_timing,
                       baselines=("eager",) if args.no_compile_baseline else ("eager", "compile"),
                       timeout_s=args.timeout, gpu=args.gpu, profile=False,
                       baseline_cache=FRESH if args.fresh_baselines else USE,
                       override_static=args.override_static, library_policy=policy)
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
    j = report.judgement
    if j.passed:
        return 0
    return 3 if j.not_checked else 1


def _keep_for_export(report, task, direction: str, candidate, opts: EvalOptions, quiet: bool) -> None:
    """Record what this evaluation found (engine.eval_records), so `kbench export --from-dir` can rely on it."""
    try:
        rec = record(report, task, direction, candidate, opts.cache_root, subset=bool(opts.configs))
    except OSError as exc:
        print(f"kbench: warning: the verdict could not be recorded for export ({exc})", file=sys.stderr)
        return
    if rec is not None and not quiet:
        print(f"verdict recorded for `kbench export --from-dir`: {rec.summary}", file=sys.stderr)
