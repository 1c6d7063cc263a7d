"""`kbench evolve TASK ...`: run (or resume) an evolution session headless, one line per event.
`kbench reevaluate ID|SESSION`: re-measure candidates on this machine's GPU and append the measurements."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from engine.cli.common import check_config_names, require_available, workspace_path
from engine.cli.evolve_summary import exit_code, summary_lines
from engine.errors import KbenchError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evolve", help="evolve faster kernels for a task (resumable: run the same command again)",
                       description="Evolve a population of candidates for TASK. Every candidate is committed to "
                                   "the workspace before it is evaluated; kill it at any moment and run the same "
                                   "command again to continue. Ctrl-C stops cleanly (twice: at once).")
    p.add_argument("task", help="built-in task name, task folder, or KernelBench .py")
    p.add_argument("--backward", action="store_true", help="evolve the backward direction")
    p.add_argument("--proposer", choices=["anthropic", "tuner", "replay", "human"], default="anthropic",
                   help="human: each proposal opens $VISUAL / $EDITOR on a parent's files (a session of hand edits)")
    p.add_argument("--replay-from", metavar="DIR|SESSION", help="replay: a folder of candidates or a workspace session")
    p.add_argument("--generations", type=int, default=3, help="generations after generation 0 (default 3)")
    p.add_argument("--population", type=int, default=8, help="candidates per generation (default 8)")
    p.add_argument("--budget-usd", type=float, default=None, help="LLM dollars for the session (default: [budget] usd)")
    p.add_argument("--wall-time", type=float, default=None, metavar="SECONDS", help="stop proposing after this long")
    p.add_argument("--session", default=None, help="session name (default: TASK-DIRECTION-PROPOSER)")
    p.add_argument("--operators", default=None, metavar="OP=W,...",
                   help="operator weights, e.g. mutate=4,crossover=1,repair=1,meta=0.5 (default per proposer)")
    p.add_argument("--seed", type=int, default=0, help="random seed for operator and parent choice")
    p.add_argument("--no-baseline", action="store_true", help="do not seed generation 0 with the task's baseline")
    p.add_argument("--hints", default="", help="free text passed to the proposer")
    p.add_argument("--model", default=None, help="anthropic: the model (default: [llm] model)")
    p.add_argument("--no-verify", action="store_true", help="anthropic: skip the LLM verifiers")
    _evaluation_args(p)
    p.add_argument("--build-workers", type=int, default=None, help="compile processes (default: CPU cores - GPUs)")
    p.add_argument("--sequential", action="store_true", help="no pipelining: compile then measure, one at a time")
    p.add_argument("--json", action="store_true", help="print events as JSON lines")
    p.add_argument("--stats-json", metavar="PATH", default=None, help="write executor statistics here at the end")
    p.add_argument("--fake-evaluator", action="store_true", help=argparse.SUPPRESS)  # tests: no compiler, no GPU
    _writer_args(p)
    p.set_defaults(func=cmd_evolve)

    p = sub.add_parser("reevaluate", help="re-measure a candidate (or a session's measured candidates) on this GPU",
                       description="Runs the full evaluation again and appends its verdicts and measurement to the "
                                   "notes; nothing is rewritten. The session branch follows the new best.")
    p.add_argument("target", help="candidate id (or unique prefix) or session name")
    p.add_argument("--all", action="store_true", help="with a session: every candidate, not just measured ones")
    _evaluation_args(p)
    p.add_argument("--fake-evaluator", action="store_true", help=argparse.SUPPRESS)
    _writer_args(p)
    p.set_defaults(func=cmd_reevaluate)


def _writer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--take-over", action="store_true",
                   help="become the session's writer although another process is recorded as it (after checking "
                        "that process is gone, e.g. its machine crashed)")
    p.add_argument("--reevaluate-damaged", action="store_true",
                   help="evaluate again candidates whose note cannot be read (`kbench fsck` names them); their "
                        "notes go on from a line naming the damaged object")


def _evaluation_args(p: argparse.ArgumentParser) -> None:
    """Flags over the config's [eval] and [executor] sections (None: the config decides)."""
    p.add_argument("--gpus", default=None, metavar="0,1", help="local: GPU indices (default: every visible GPU)")
    p.add_argument("--executor", choices=["local", "ray"], default=None,
                   help="where evaluations run (default: [executor] kind, local)")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="ray: the cluster (auto, HOST:6379, ray://HOST:10001); default: start a local Ray instance")
    p.add_argument("--trials", type=int, default=None, help="fresh-seed correctness trials per config (default 2)")
    p.add_argument("--timeout", type=float, default=None, help="seconds before one evaluation is killed (600)")
    p.add_argument("--no-compile-baseline", action="store_true", help="time against eager only (faster)")
    p.add_argument("--time-config", action="append", dest="timing_configs", metavar="NAME",
                   help="time only this config (repeatable; correctness still runs on every config)")
    p.add_argument("--no-profile", action="store_true", help="skip the profile stage (ncu + torch profiler)")
    p.add_argument("--library-policy", choices=["pure", "engineering"], default=None,
                   help="vendor libraries and ATen: pure (not allowed) or engineering (allowed, tagged on each "
                        "candidate); default: [eval] library_policy, else the task's, else pure")


def _config_flags(args: argparse.Namespace) -> dict[str, Any]:
    flags: dict[str, Any] = {"executor.kind": args.executor, "executor.ray_address": args.ray_address,
                             "executor.gpus": args.gpus, "executor.build_workers": getattr(args, "build_workers", None),
                             "eval.trials": args.trials, "eval.timeout_s": args.timeout,
                             "eval.timing_configs": args.timing_configs,
                             "eval.library_policy": getattr(args, "library_policy", None)}
    if args.no_compile_baseline:
        flags["eval.compile_baseline"] = False
    if args.no_profile:
        flags["eval.profile"] = False
    if args.ray_address and not args.executor:
        flags["executor.kind"] = "ray"
    if getattr(args, "model", None):
        flags["llm.model"] = args.model
    return flags


def _workspace(args: argparse.Namespace):
    from engine.workspace import Workspace

    ws = Workspace.create(workspace_path(args))
    ws.accept_damage = bool(getattr(args, "reevaluate_damaged", False))
    return ws


def _evaluator(args: argparse.Namespace, task: Any, direction: str, config: Any):
    from engine.evolve.executor import FakeEvaluator
    from engine.evolve.factory import make_evaluator

    if args.fake_evaluator:
        import os
        return FakeEvaluator(task, delay_s=float(os.environ.get("KBENCH_FAKE_EVAL_DELAY", "0") or 0))
    return make_evaluator(task, direction, config, sequential=getattr(args, "sequential", False))


def _proposer(args: argparse.Namespace, ws: Any, config: Any, ledger: Any):
    from engine.proposers import make_proposer
    from engine.proposers.replay import ReplayProposer

    if args.proposer == "replay":
        if not args.replay_from:
            raise KbenchError("--proposer replay needs --replay-from DIR|SESSION")
        if args.replay_from in {s.name for s in ws.sessions()}:
            return ReplayProposer.from_workspace(ws, args.replay_from)
        return ReplayProposer.from_directory(args.replay_from)
    if args.proposer == "anthropic":
        prop = make_proposer("anthropic", config, ledger=ledger)
        if not prop.available():
            raise KbenchError(prop.unavailable_reason() or "the anthropic proposer is not available")
        return prop
    return require_available(make_proposer(args.proposer, config))


def cmd_evolve(args: argparse.Namespace) -> int:
    from engine.config import load_config
    from engine.evolve.checks import session_checks
    from engine.evolve.loop import Budgets, EvolutionSession
    from engine.evolve.operators import default_policy, parse_weights
    from engine.integrity.policy import resolve_policy
    from engine.llm.accounting import CostLedger
    from engine.tasks.loader import load_task

    task = load_task(args.task)
    direction = "backward" if args.backward else "forward"
    task.spec(direction)
    check_config_names(task, args.timing_configs, "--time-config")
    if args.generations < 0 or args.population < 1:
        raise KbenchError("--generations must be >= 0 and --population >= 1")
    ws = _workspace(args)
    config = load_config(ws.path, _config_flags(args))
    ledger = CostLedger(None)   # the loop enforces the session budget, counting what earlier runs spent
    usd = args.budget_usd if args.budget_usd is not None else (
        config.budget.usd if args.proposer == "anthropic" else None)
    proposer = _proposer(args, ws, config, ledger)
    verifier = None
    if args.proposer == "anthropic" and not args.no_verify and config.verify.enabled:
        from engine.llm.client import LLMClient
        from engine.llm.verifiers import verify

        client = LLMClient(config.llm, ledger)
        verifier = lambda cand: verify(client, config, task, direction, cand)
    name = args.session or f"{task.name}-{'bwd' if args.backward else 'fwd'}-{args.proposer}"
    # the session's one writer until this process exits; refused here, naming the holder, before anything starts
    ws.claim(name, "kbench evolve", take_over=args.take_over)
    evaluator = _evaluator(args, task, direction, config)
    session = EvolutionSession(
        ws, name, task, proposer, evaluator, direction=direction,
        budgets=Budgets(generations=args.generations, population=args.population, usd=usd, wall_s=args.wall_time),
        policy=default_policy(args.proposer, parse_weights(args.operators) if args.operators else None),
        ledger=ledger, verifier=verifier, use_baseline=not args.no_baseline, hints=args.hints, seed=args.seed,
        model=config.llm.model if args.proposer == "anthropic" else None,
        checks=session_checks(config.eval.library_policy),
        session_config={"generations": args.generations, "population": args.population, "budget_usd": usd,
                        "operators": args.operators, "seed": args.seed,
                        "library_policy": resolve_policy(config.eval.library_policy, task).to_json()})
    t0 = time.monotonic()

    def show(e) -> None:
        if args.json:
            print(json.dumps(e.to_json(), default=str), flush=True)
        else:
            print(f"{time.monotonic() - t0:8.1f}s  {e.line()}", flush=True)

    session.subscribe(show)
    interrupted = False
    try:
        session.start()      # inside: a Ctrl-C that comes before the first join still stops it cleanly
        while session.running:
            session.join(0.25)
    except KeyboardInterrupt:
        interrupted = True
        print("kbench: stopping (running evaluations are abandoned and re-queued on resume; Ctrl-C again to quit "
              "at once)", file=sys.stderr, flush=True)
        session.stop(wait_for_evaluations=False)
        session.join()
    finally:
        evaluator.close(wait=not interrupted)
    stats = evaluator.stats()
    if args.stats_json:
        Path(args.stats_json).write_text(json.dumps(stats, indent=2, default=str))
    result = session.result
    if session.error is not None:
        raise session.error      # `kbench: error: ...`, exit 2 (the session is resumable as it stands)
    if not args.json:
        print("\n".join(summary_lines(stats, result, name)), flush=True)
    return exit_code(result, interrupted)


def cmd_reevaluate(args: argparse.Namespace) -> int:
    from engine.tasks.loader import load_task
    from engine.tasks.model import Task
    from engine.verdict import Status

    ws = _workspace(args)
    sessions = {s.name: s for s in ws.sessions()}
    if args.target in sessions:
        info = sessions[args.target]
        views = ws.candidates(info.name, strict=False)
        damaged = [v for v in views if v.problem]
        if damaged and not ws.accept_damage:
            raise KbenchError(damaged[0].problem)
        if not args.all:
            views = [v for v in views if v.status.measurement is not None or v.problem
                     or v.status.status_of("correctness") == Status.PASS]
    else:
        view = ws.view(args.target)
        info = ws.session(view.record.session)
        views = [view]
    if not views:
        print(f"nothing to re-evaluate in {args.target}")
        return 0
    task_json = (info.config or {}).get("task_json") or {}
    task = None
    task_json = ws._session_json(info.name).get("task_json") or task_json   # damage here is named, not skipped
    if task_json and Path(str(task_json.get("root", ""))).exists():
        task = Task.from_json(task_json)
    if task is None:
        task = load_task(info.task)
    claim = ws.claim(info.name, "kbench reevaluate", take_over=args.take_over)
    try:
        return _reevaluate(args, ws, info, views, task)
    finally:
        claim.release()


def _reevaluate(args: argparse.Namespace, ws: Any, info: Any, views: list[Any], task: Any) -> int:
    from engine.config import load_config

    evaluator = _evaluator(args, task, info.direction, load_config(ws.path, _config_flags(args)))
    futs = [(v, evaluator.submit(ws.files(v.id))) for v in views]
    code = 0
    try:
        for v, fut in futs:
            out = fut.result()
            notes = out.reevaluation_notes(by="reevaluate")
            st = ws.record(v.id, notes) if notes else v.status
            if out.not_judged:
                print(f"{v.id}: {out.not_judged}", flush=True)
                code = 1
                continue
            meas = out.measurement()
            before = v.status.speedup
            was = f"{before:.3f}x" if before else "-"
            now = f"{st.speedup:.3f}x" if meas is not None and st.speedup else f"failed at {out.failed_stage}"
            print(f"{v.id}: {was} -> {now} on {(out.device or {}).get('gpu') or 'no GPU'}", flush=True)
            if out.failed_stage:
                code = 1
    finally:
        evaluator.close()
    best = ws.best(info.name)
    if best is not None:
        print(f"session {info.name}: best {best.id} {best.speedup:.3f}x")
    return code
