"""Running a candidate under the profilers: ncu on its kernels for one config, the torch profiler on it and
on the reference, in the runner's jail (engine/jail: the child is jailed before Python starts, ncu wraps the
jail launcher), then the `profile` verdict (engine/profile/runner.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout

from engine.harness.build import stage as builds  # a module, as in evaluate: tests substitute build_candidate
from engine.harness.roofline import Peaks
from engine.harness.toolchain import detect as detect_toolchain
from engine.jail import REFUSED
from engine.jail import command as jailed
from engine.jail.profiles import profiled_spec
from engine.pipeline.candidate_spec import candidate_spec
from engine.pipeline.eval_types import default_cache_root
from engine.pipeline.judge.runner_process import make_run_dir, stage_candidate
from engine.pipeline.protocol.profile_types import ProfileRequest, ProfileResult, read_result
from engine.pipeline.protocol.types import CandidateSpec
from engine.procs import stop_step
from engine.profile.ncu import (build_ncu_command, ncu_install_dirs, ncu_unavailable_reason, parse_ncu_csv,
                                permission_denied)
from engine.profile.runner import STAGE, ProfileOptions, profile_verdict, representative_config
from engine.profile.summarise import summarise
from engine.tasks.glue.abi import GlueError
from engine.tasks.glue.generated import materialise
from engine.tasks.model import ALL_CONFIGS
from engine.verdict import Status, Verdict

NCU_LOCK = "/tmp/kbench-ncu.lock"   # machine-wide, whatever TMPDIR says: the counters are the GPU's

if TYPE_CHECKING:
    from engine.candidates import Candidate
    from engine.harness.roofline import Peaks
    from engine.pipeline.eval_types import EvalOptions
    from engine.tasks.model import Task


@dataclass(frozen=True)
class ProfileJob:
    """What both profilers run: the parent's side of a ProfileRequest, before the candidate is staged."""
    task: dict[str, Any]                  # Task.to_json()
    direction: str
    config: str
    candidate: CandidateSpec | None = None


def _jailed_run(job: ProfileJob, opts: ProfileOptions, mode: str, timeout_s: float,
                ncu: str | None = None) -> tuple[str, ProfileResult, str]:
    """Run the profile child on the candidate, jailed like a runner (under ncu when `ncu` is given).
    Returns (its output, its result, why it failed or "")."""
    # the child imports the task's reference (trusted, but it lives in the user's folder): that folder only
    directions = job.task.get("directions") or {}
    ref_dirs = sorted({str(Path(d["reference_path"]).parent) for d in directions.values()})
    run = make_run_dir([Path(d) for d in ref_dirs])
    try:
        load = stage_candidate(run, job.candidate) if job.candidate else None
        result_path = run.scratch / "result.json"
        req = run.ro / "request.json"
        request = ProfileRequest(task=job.task, direction=job.direction, config=job.config, mode=mode,
                                 result_path=str(result_path), candidate=load, launches=opts.launch_count)
        req.write_text(json.dumps(request.to_json()))
        os.chmod(req, 0o644)
        child = [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-m",
                 "engine.pipeline.runner.profile_child", str(req)]
        spec = run.spec()
        log, report = run.root / "profile.log", run.root / "profile-report.json"   # kbench's, out of the jail
        if ncu is None:   # the supervisor jails the child, caps its output and kills its tree when it ends
            cmd = jailed(child, spec, log=str(log), report=str(report))
        else:   # the jailed process loads ncu's injection library and lets ncu attach to it: ncu runs the jail
            # launcher, which jails and execs the child; the supervisor is around ncu and all it starts
            inner = jailed(child, profiled_spec(spec, ncu_install_dirs(ncu)), supervise=False)
            cmd = jailed(build_ncu_command(inner, ncu=ncu, launch_count=opts.launch_count), None, log=str(log),
                         report=str(report))
        env = run.environment({"CUDA_VISIBLE_DEVICES": str(opts.gpu)} if opts.gpu is not None else None)
        try:
            proc = subprocess.Popen(cmd, cwd=run.scratch, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            return "", ProfileResult(), f"{'ncu' if ncu else 'the profiler'} could not be started: {exc}"
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_step(proc)
            return "", ProfileResult(), f"{'ncu' if ncu else 'the torch profiler'} timed out after {timeout_s:.0f} s"
        finally:
            stop_step(proc)
        out = log.read_bytes().decode("utf-8", errors="replace") if log.is_file() else ""
        if proc.returncode == 126 and out.startswith("cannot run"):   # the supervisor could not exec it
            return "", ProfileResult(), f"{'ncu' if ncu else 'the profiler'} could not be started: " \
                                        f"{out.strip().splitlines()[0]}"
        if ncu is not None:   # ncu's part is its output; the child's result only says it ran
            return out, ProfileResult(), ""
        return (out, *judge_torch_result(read_result(result_path), proc.returncode, out))
    finally:
        shutil.rmtree(run.root, ignore_errors=True)


def judge_torch_result(read: tuple[ProfileResult, str], returncode: int | None,
                       out: str) -> tuple[ProfileResult, str]:
    """(the torch profiler child's result, why it failed or ""), from read_result's answer and how it exited.
    A result file the candidate forged or garbled fails like a child that wrote none, with the reason."""
    result, unreadable = read
    tail = " | ".join(out.strip().splitlines()[-4:])
    if unreadable:
        return ProfileResult(), f"the profiler's result could not be read ({unreadable}); it exited with " \
                                f"code {returncode}: {tail}"
    if returncode != 0 or not result.finished:
        return result, result.error or f"the profiler exited with code {returncode}: {tail}"
    return result, result.error or ""


def run_ncu(job: ProfileJob, opts: ProfileOptions) -> tuple[list, str]:
    """(kernels, skip reason); kernels empty whenever the reason is set."""
    reason = ncu_unavailable_reason(opts.ncu)
    if reason:
        return [], reason
    ncu = opts.ncu or shutil.which("ncu") or "ncu"   # resolved here: the jailed PATH may not hold it
    # One ncu at a time on this machine: two sessions replaying kernels on the GPU's counters at once fail
    # ("Failed to profile ... error code (9)" beside a concurrent profile, on an H100) or skew each other.
    t0 = time.monotonic()
    try:
        with FileLock(NCU_LOCK, timeout=opts.ncu_timeout_s, mode=0o666):
            left = opts.ncu_timeout_s - (time.monotonic() - t0)
            out, _, failed = _jailed_run(job, opts, "ncu", max(left, 30.0), ncu=ncu)
    except Timeout:
        return [], f"another ncu profile held this machine's lock ({NCU_LOCK}) for {opts.ncu_timeout_s:.0f} s"
    except PermissionError:   # the lock file is another user's and not writable: profile without it
        out, _, failed = _jailed_run(job, opts, "ncu", opts.ncu_timeout_s, ncu=ncu)
    if failed:
        return [], failed
    if permission_denied(out):
        return [], "ncu is not permitted to read GPU performance counters (ERR_NVGPUCTRPERM)"
    refused = next((ln.strip() for ln in out.splitlines() if ln.startswith(REFUSED)), "")
    if refused:   # the candidate never ran: its jail could not be made whole on this machine
        return [], f"ncu did not run the candidate: {refused}"
    kernels = parse_ncu_csv(out)
    if not kernels:
        tail = out.strip().splitlines()[-3:]
        return [], "ncu profiled no candidate kernel" + (f": {' | '.join(tail)}" if tail else "")
    return kernels, ""


def run_torch_profiler(job: ProfileJob, opts: ProfileOptions) -> tuple[list[dict], list[dict], str]:
    _, res, failed = _jailed_run(job, opts, "torch", opts.torch_timeout_s)
    if failed:
        return [], [], failed
    return ([dataclasses.asdict(r) for r in res.candidate_ops], [dataclasses.asdict(r) for r in res.reference_ops],
            "")


def profile_candidate(task: Task, candidate: Candidate, direction: str = "forward",
                      options: ProfileOptions | None = None, peaks: Peaks | None = None,
                      cache_root: Path | None = None) -> Verdict:
    """Build (cache hit after an evaluation) and profile a candidate; the `profile` Verdict."""
    t0 = time.monotonic()
    opts = options or ProfileOptions()
    cache_root = cache_root or default_cache_root()
    if getattr(candidate, "format", None) in ("kernel-only", "triton"):
        try:
            candidate = materialise(candidate, task, direction)
        except GlueError as exc:
            return Verdict(STAGE, Status.SKIPPED, str(exc))
    toolchain = detect_toolchain()
    build = builds.build_candidate(candidate, cache_root, toolchain)
    if not build.ok:
        return Verdict(STAGE, Status.SKIPPED, f"the candidate does not build: {build.error or 'compilation failed'}")
    spec = candidate_spec(candidate, build, cache_root, toolchain)
    config = representative_config(task, opts.config)
    job = ProfileJob(task=task.to_json(), direction=direction, config=config, candidate=spec)
    kernels, skipped = run_ncu(job, opts)
    cand_ops, ref_ops, torch_error = run_torch_profiler(job, opts)
    cost = next(c for c in task.configs if c.name == config).cost.get(direction)
    summary = summarise(kernels, peaks, config=config, torch_ops=cand_ops, reference_ops=ref_ops,
                        ncu_skipped=skipped, flops=cost.flops if cost is not None else None)
    verdict = profile_verdict(summary, torch_error)
    verdict.data["seconds"] = round(time.monotonic() - t0, 2)
    return verdict


def profile_stage(task: Task, candidate: Candidate, direction: str, eval_options: EvalOptions,
                  peaks_json: dict | None) -> Verdict:
    """The stage as `evaluate()` runs it after timing: never raises, never blocks (pass or skipped)."""
    try:
        peaks = Peaks(**{"measured_at": 0.0, **peaks_json}) if peaks_json else None
        opts = ProfileOptions(gpu=getattr(eval_options, "gpu", None))
        timing = getattr(eval_options, "timing_configs", None)
        if timing and ALL_CONFIGS not in timing:   # the configs named for timing: the last of them
            opts.config = timing[-1]               # (else representative_config: `bench` or a default-timed one)
        return profile_candidate(task, candidate, direction, opts, peaks=peaks,
                                 cache_root=getattr(eval_options, "cache_root", None))
    except Exception as exc:  # noqa: BLE001 - profiling is feedback; its failure must not fail the candidate
        return Verdict(STAGE, Status.SKIPPED, f"profiling failed: {type(exc).__name__}: {str(exc)[:300]}")
