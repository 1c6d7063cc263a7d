"""`kbench profile TASK CANDIDATE`: Nsight Compute + torch profiler on one config, summarised.

Lazy imports: engine.evolve.worker_fns (for the visible GPUs) loads the evolve package, which the other `kbench`
commands do not need: every command loads this module at start-up."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.cli.cmd_roofline import _gpu_name
from engine.cli.common import check_config_names, workspace_path
from engine.harness.roofline import load_peaks
from engine.pipeline.eval_types import default_cache_root
from engine.pipeline.profiling import profile_candidate
from engine.profile.runner import ProfileOptions
from engine.tasks.glue.generated import load_for_task
from engine.tasks.loader import load_task
from engine.verdict import Stage, Status
from engine.workspace import Workspace


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="profile a candidate (ncu sections + torch profiler top ops) on one config",
                       description="CANDIDATE: a candidate path (as for kbench eval) or a workspace candidate id; "
                                   "for an id the profile verdict is recorded as a note (unless --no-record). "
                                   "Exit 0 when ncu data was collected, 3 when the ncu part was skipped.")
    p.add_argument("task", help="built-in task name, task folder, or KernelBench .py")
    p.add_argument("candidate", help="candidate path, or a workspace candidate id")
    p.add_argument("--backward", action="store_true", help="profile the backward direction")
    p.add_argument("--config", default=None, help="config to profile (default: the task's last)")
    p.add_argument("--launch-count", type=int, default=3, help="kernel launches ncu profiles (default 3)")
    p.add_argument("--gpu", type=int, default=None, help="GPU index")
    p.add_argument("--no-record", action="store_true", help="do not record the verdict in the workspace")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.set_defaults(func=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> int:
    task = load_task(args.task)
    task.spec("backward" if args.backward else "forward")
    check_config_names(task, [args.config] if args.config else None, "--config")
    if not _gpu_visible():
        return _no_gpu(args)
    ws = None
    if Path(args.candidate).exists():
        candidate, cid = load_for_task(args.candidate, task, "backward" if args.backward else "forward"), None
    else:
        ws = Workspace.open(workspace_path(args))
        cid = ws.resolve(args.candidate).id
        candidate = ws.files(cid)
    gpu = _gpu_name(args.gpu)
    peaks = load_peaks(default_cache_root(), gpu) if gpu else None
    opts = ProfileOptions(config=args.config, launch_count=args.launch_count, gpu=args.gpu)
    verdict = profile_candidate(task, candidate, "backward" if args.backward else "forward", opts, peaks=peaks)
    if ws is not None and cid and not args.no_record:
        ws.record_verdict(cid, verdict, by="kbench profile")
    if args.json:
        print(json.dumps(verdict.to_json(), indent=2))
    else:
        if verdict.status.value == "skipped":
            print(f"ncu part skipped: {verdict.reason}", file=sys.stderr)
        print(verdict.data.get("text") or verdict.reason)
        if peaks is None:
            print("(no cached roofline for this GPU: run `kbench roofline` for fractions of peak)", file=sys.stderr)
    return 0 if verdict.status.value == "pass" else 3


NO_GPU_MESSAGE = ("no CUDA GPU is visible: profiling (Nsight Compute and the torch profiler) runs the kernel on a "
                  "GPU; nothing was built or run, nothing recorded")


def _gpu_visible() -> bool:
    from engine.evolve.worker_fns import visible_gpus
    return bool(visible_gpus())


def _no_gpu(args: argparse.Namespace) -> int:
    """Say it at once, instead of building the candidate and reporting only that ncu is missing (exit 3, as
    `kbench eval` without a GPU)."""
    if args.json:
        print(json.dumps({"stage": Stage.PROFILE, "status": Status.SKIPPED, "reason": NO_GPU_MESSAGE}, indent=2))
    print(f"kbench: {NO_GPU_MESSAGE}", file=sys.stderr)
    return 3
