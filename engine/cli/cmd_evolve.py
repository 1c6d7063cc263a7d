"""`kbench evolve TASK ...`: run (or resume) an evolution session headless, one line per event.
`kbench reevaluate ID|SESSION`: re-measure candidates on this machine's GPU and append the measurements.
`kbench edit ID`: a hand edit in $VISUAL/$EDITOR, committed as the candidate's child, then evaluated.

Lazy imports: the session service, its wiring and the LLM target are imported inside the commands: every
`kbench` command loads this module at start-up, and only these commands need them."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine import procs
from engine.cli.common import check_config_names, workspace_path
from engine.cli.eval_flags import add_evaluation_flags, evaluation_config_flags
from engine.cli.evolve_summary import EXIT_WAITING_FOR_GPU, exit_code, summary_lines
from engine.config.load import load_config
from engine.errors import KbenchError
from engine.service.spec import DEFAULTS, SESSION_PROPOSERS, SessionSpec
from engine.tasks.loader import load_task
from engine.workspace import Workspace

if TYPE_CHECKING:
    from engine.service.session_service import SessionService


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evolve", help="evolve faster kernels for a task (resumable: run the same command again)",
                       description="Evolve a population of candidates for TASK. Every candidate is committed to "
                                   "the workspace before it is evaluated; kill it at any moment and run the same "
                                   "command again to continue. Ctrl-C stops cleanly (twice: at once). Exit codes: "
                                   "0 the budgets ran out, 1 stopped for a reason (shown), 2 bad input, 75 paused "
                                   "because the LLM API was unavailable (run the same command later), 130 Ctrl-C.")
    p.add_argument("task", help="built-in task name, task folder, or KernelBench .py")
    p.add_argument("--backward", action="store_true", help="evolve the backward direction")
    p.add_argument("--proposer", choices=list(SESSION_PROPOSERS), default=None,
                   help="default: the LLM proposer of [llm] provider (anthropic, or openai for an "
                        "OpenAI-compatible endpoint); human: each proposal opens $VISUAL / $EDITOR on a parent's "
                        "files (a session of hand edits)")
    p.add_argument("--replay-from", metavar="DIR|SESSION", help="replay: a folder of candidates or a workspace session")
    p.add_argument("--generations", type=int, default=None,
                   help=f"generations after generation 0 (default {DEFAULTS.generations}, or the session's)")
    p.add_argument("--population", type=int, default=None,
                   help=f"candidates per generation (default {DEFAULTS.population}, or the session's)")
    p.add_argument("--budget-usd", type=float, default=None, help="LLM dollars for the session (default: [budget] usd)")
    p.add_argument("--wall-time", type=float, default=None, metavar="SECONDS", help="stop proposing after this long")
    p.add_argument("--session", default=None, help="session name (default: TASK-DIRECTION-PROPOSER)")
    p.add_argument("--operators", default=None, metavar="OP=W,...",
                   help="operator weights, e.g. mutate=4,crossover=1,repair=1,meta=0.5 (default per proposer)")
    p.add_argument("--seed", type=int, default=None, help="random seed for operator and parent choice (default 0)")
    p.add_argument("--no-baseline", action="store_true", help="do not seed generation 0 with the task's baseline")
    p.add_argument("--hints", default=None, help="free text passed to the proposer")
    p.add_argument("--model", default=None, help="LLM proposers: the model (default: [llm] model)")
    p.add_argument("--no-verify", action="store_true", help="LLM proposers: skip the LLM verifiers")
    _evaluation_args(p)
    p.add_argument("--build-workers", type=int, default=None, help="compile processes (default: CPU cores - GPUs)")
    p.add_argument("--sequential", action="store_true", help="no pipelining: compile then measure, one at a time")
    p.add_argument("--json", action="store_true", help="print events as JSON lines")
    p.add_argument("--stats-json", metavar="PATH", default=None, help="write executor statistics here at the end")
    _writer_args(p)
    p.set_defaults(func=cmd_evolve)

    p = sub.add_parser("reevaluate", help="re-measure a candidate (or a session's measured candidates) on this GPU",
                       description="Runs the full evaluation again and appends its verdicts and measurement to the "
                                   "notes; nothing is rewritten. The session branch follows the new best. Exit codes: "
                                   "0 measured, 1 a candidate failed (or was not judged), 3 no GPU visible (nothing "
                                   "measured or written, as `kbench eval`).")
    p.add_argument("target", help="candidate id (or unique prefix) or session name")
    p.add_argument("--all", action="store_true", help="with a session: every candidate, not just measured ones")
    _evaluation_args(p)
    _writer_args(p)
    p.set_defaults(func=cmd_reevaluate)

    p = sub.add_parser("edit", help="edit a candidate by hand in $VISUAL/$EDITOR; the result is committed as its "
                                    "child and evaluated",
                       description="Opens a copy of the candidate's files (with the task's reference.py and a "
                                   "RATIONALE.md to fill in) in $VISUAL or $EDITOR and waits for it. Edited files are "
                                   "committed as a `human` candidate, a child of ID one generation down, then "
                                   "evaluated as `kbench reevaluate` would (unless --no-eval). Unchanged files commit "
                                   "nothing; a result that is no readable candidate keeps its folder, named in the "
                                   "error. Exit codes as `kbench reevaluate`; 1 when nothing was committed.")
    p.add_argument("candidate", metavar="ID", help="candidate id, unique id prefix, ref or revision")
    p.add_argument("--no-eval", action="store_true", help="commit the edit only (judge it later with "
                                                          "`kbench reevaluate NEW`)")
    _evaluation_args(p)
    _writer_args(p)
    p.set_defaults(func=cmd_edit)


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
    add_evaluation_flags(p)     # --trials, --timeout, --time-config, ... and the timing loop's (eval_flags.py)
    p.add_argument("--profile", choices=["best", "all", "off"], default=None, dest="profile",
                   help="the profile stage (ncu + torch profiler): best (each new best of the session), all (every "
                        "candidate that passes) or off; default: [eval] profile, else best")
    p.add_argument("--no-profile", action="store_const", const="off", dest="profile",
                   help="skip the profile stage (the same as --profile off)")


def _config_flags(args: argparse.Namespace) -> dict[str, Any]:
    flags: dict[str, Any] = {"executor.kind": args.executor, "executor.ray_address": args.ray_address,
                             "executor.gpus": args.gpus, "executor.build_workers": getattr(args, "build_workers", None),
                             "eval.profile": getattr(args, "profile", None), **evaluation_config_flags(args)}
    if args.ray_address and not args.executor:
        flags["executor.kind"] = "ray"
    if getattr(args, "model", None):
        flags["llm.model"] = args.model
    return flags


def _workspace(args: argparse.Namespace):
    ws = Workspace.create(workspace_path(args))
    ws.accept_damage = bool(getattr(args, "reevaluate_damaged", False))
    return ws


EX_TEMPFAIL = 75    # sysexits: a temporary failure (the LLM API was unavailable); the same command resumes


def _service(args: argparse.Namespace, ws: Workspace) -> SessionService:
    """The session service over this workspace and its config (files + flags), evaluating as configured."""
    from engine.service.session_service import SessionService

    return SessionService(ws, load_config(ws.path, _config_flags(args)))


def cmd_evolve(args: argparse.Namespace) -> int:
    check_config_names(load_task(args.task), args.timing_configs, "--time-config", allow_all=True)
    ws = _workspace(args)
    service = _service(args, ws)
    spec = SessionSpec(task=args.task, direction="backward" if args.backward else "forward", proposer=args.proposer,
                       generations=args.generations, population=args.population, usd=args.budget_usd,
                       wall_s=args.wall_time, name=args.session, operators=args.operators, seed=args.seed,
                       use_baseline=False if args.no_baseline else None, hints=args.hints,
                       verify=False if args.no_verify else None, replay_from=args.replay_from, started_from="cli",
                       take_over=args.take_over)
    t0 = time.monotonic()
    finished = threading.Event()    # waited on rather than Thread.join: an interrupted join can return early

    def show(e) -> None:
        if args.json:
            print(json.dumps(e.to_json(), default=str), flush=True)
        else:
            print(f"{time.monotonic() - t0:8.1f}s  {e.line()}", flush=True)
        if e.kind == "Stopped":
            finished.set()

    procs.become_subreaper()   # orphans of what it starts come back to it: a second Ctrl-C finds them all
    run = service.start(spec, on_event=show, on_unavailable="stop", sequential=args.sequential, background=False)
    session, evaluator, name = run.session, run.evaluator, run.plan.name
    interrupted = False
    try:
        session.start()      # inside: a Ctrl-C that comes before the first wait still stops it cleanly
        while not finished.wait(0.25):
            pass
    except KeyboardInterrupt:
        interrupted = True
        signal.signal(signal.SIGINT, _quit_at_once)
        print("kbench: stopping (running evaluations are abandoned and re-queued on resume; Ctrl-C again to quit "
              "at once)", file=sys.stderr, flush=True)
        session.stop(wait_for_evaluations=False)
        while not finished.wait(0.25):
            pass
    finally:
        run.close(wait=not interrupted)
    stats = evaluator.stats()
    if args.stats_json:
        Path(args.stats_json).write_text(json.dumps(stats, indent=2, default=str))
    result = session.result
    if session.error is not None:
        raise session.error      # `kbench: error: ...`, exit 2 (the session is resumable as it stands)
    if not args.json:
        print("\n".join(summary_lines(stats, result, name)), flush=True)
    if not interrupted and result is not None and result.paused:
        print(f"kbench: session {name} paused: {result.reason}", file=sys.stderr, flush=True)
        return EX_TEMPFAIL
    code = exit_code(result, interrupted)
    if code == 1 and result is not None:
        print(f"kbench: session {name} stopped: {result.reason}", file=sys.stderr, flush=True)
    return code


def _quit_at_once(_signum: int, _frame: Any) -> None:
    """The second Ctrl-C: every process kbench started is stopped (each step's supervisor kills its tree) and
    kbench exits now, without waiting for builds or threads and without a traceback. The workspace is as a
    kill -9 would leave it: whole (every write is an object, then one ref transaction); resuming re-queues
    what was running."""
    procs.end_descendants()
    sys.stderr.write("kbench: quit (the same command resumes the session)\n")
    sys.stderr.flush()
    os._exit(130)


def cmd_reevaluate(args: argparse.Namespace) -> int:
    ws = _workspace(args)
    service = _service(args, ws)
    info, views = service.reevaluation_targets(args.target, args.all)
    if not views:
        print(f"nothing to re-evaluate in {args.target}")
        return 0
    return _reevaluate(service, ws, info.name, args.target, args.all, args.take_over)


def cmd_edit(args: argparse.Namespace) -> int:
    """A hand edit, committed as the app commits one (engine.service.person_actions), then evaluated."""
    from engine.service.person_actions import hand_edit
    ws = _workspace(args)
    service = _service(args, ws)
    try:
        new = hand_edit(ws, args.candidate, service.task_of)
    except KbenchError as exc:
        print(f"kbench: {exc}", file=sys.stderr)
        return 1
    print(f"committed {new.id} (hand edit of {new.parents[0]})", flush=True)
    if args.no_eval:
        print(f"judge it with: kbench reevaluate {new.id}")
        return 0
    return _reevaluate(service, ws, new.session, new.id, False, args.take_over)


def _reevaluate(service: SessionService, ws: Workspace, session: str, target: str, all_: bool,
                take_over: bool) -> int:
    """Evaluate `target` again and say how each candidate came out; the exit code of `kbench reevaluate`."""
    code = 0
    for r in service.reevaluate(target, all_=all_, take_over=take_over):
        out = r.outcome
        if out.no_gpu:          # nothing measured and nothing written: exit 3, as eval and evolve without a GPU
            print(f"{r.id}: not re-measured: {out.infra_error}; its notes are unchanged (run it where a GPU is "
                  "visible)", flush=True)
            code = code or EXIT_WAITING_FOR_GPU
            continue
        if out.not_judged:
            print(f"{r.id}: {out.not_judged}", flush=True)
            code = 1
            continue
        meas = out.measurement()
        was = f"{r.before:.3f}x" if r.before else "-"
        now = f"{r.status.speedup:.3f}x" if meas is not None and r.status.speedup else f"failed at {out.failed_stage}"
        print(f"{r.id}: {was} -> {now} on {(out.device or {}).get('gpu') or 'no GPU'}", flush=True)
        if r.profile is not None:
            print(f"{r.id}: profile {r.profile.status.value}: {r.profile.reason}", flush=True)
        if out.failed_stage:
            code = 1
    best = ws.best(session)
    if best is not None:
        print(f"session {session}: best {best.id} {best.speedup:.3f}x")
    return code
