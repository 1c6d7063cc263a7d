"""`kbench eval TASK CANDIDATE [--backward] [--json]`: compile, check every config, time."""

from __future__ import annotations

import argparse
import json
import sys

from engine.cli.common import check_config_names
from engine.config import load_config
from engine.eval_records import record
from engine.pipeline.evaluate import EvalOptions, evaluate
from engine.pipeline.report import render
from engine.tasks.glue import load_for_task
from engine.tasks.loader import load_task


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a candidate: compile, correctness on every config, timing",
                       description="Exit code 0 only when the candidate passes (engine.verdict.judge: it compiles, "
                       "passes every config, and no stage fails or is suspicious); 3 when it compiled but "
                       "correctness could not be checked (no GPU); 1 otherwise.")
    p.add_argument("task", help="built-in task name, task folder, or KernelBench .py")
    p.add_argument("candidate", help="native folder (kernel.cu + binding.cpp), kernel-only kernel.cu (its binding "
                                     "generated from the task signature: `kbench glue TASK`), robust-kbench .cu, or "
                                     "ModelNew .py")
    p.add_argument("--backward", action="store_true", help="evaluate the backward direction")
    p.add_argument("--config", action="append", dest="configs", metavar="NAME", help="only this config (repeatable)")
    p.add_argument("--time-config", action="append", dest="timing_configs", metavar="NAME",
                   help="time only this config (repeatable), or `all` for every config; correctness still runs on "
                        "every selected config. Default: `bench` and the configs tagged `timed` (every config "
                        "where the task has neither)")
    p.add_argument("--trials", type=int, default=2, help="fresh-seed trials per config (default 2)")
    p.add_argument("--no-timing", action="store_true", help="check correctness only")
    p.add_argument("--no-compile-baseline", action="store_true", help="skip the torch.compile baseline")
    p.add_argument("--no-profile", action="store_true", help="skip the profile stage (ncu + torch profiler)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds before the evaluator is killed")
    p.add_argument("--gpu", type=int, default=None, help="GPU index to pin the evaluation to")
    p.add_argument("--override-static", action="store_true",
                   help="a person's override: go on past a static `fail` (the verdict then says overridden)")
    p.add_argument("--library-policy", choices=["pure", "engineering"], default=None,
                   help="vendor libraries and ATen: pure (not allowed) or engineering (allowed, tagged); "
                        "default: [eval] library_policy, else the task's, else pure")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    task = load_task(args.task)
    direction = "backward" if args.backward else "forward"
    task.spec(direction)                       # a missing direction is bad input, before any compile
    check_config_names(task, args.configs, "--config")
    check_config_names(task, args.timing_configs, "--time-config", allow_all=True)
    candidate = load_for_task(args.candidate, task, direction)   # kernel-only: binding.cpp generated here
    policy = args.library_policy
    if policy is None:
        policy = load_config(None).eval.library_policy
    opts = EvalOptions(configs=args.configs, timing_configs=args.timing_configs, trials=args.trials, timing=not args.no_timing,
                       baselines=("eager",) if args.no_compile_baseline else ("eager", "compile"),
                       timeout_s=args.timeout, gpu=args.gpu, profile=not args.no_profile,
                       override_static=args.override_static, library_policy=policy)
    quiet = args.json
    report = evaluate(task, candidate, direction, opts,
                      progress=None if quiet else (lambda m: print(f"… {m}", file=sys.stderr, flush=True)))
    print(json.dumps(report.to_json(), indent=2) if args.json else render(report))
    _keep_for_export(report, task, direction, candidate, opts, quiet)
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
