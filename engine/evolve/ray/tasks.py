"""What runs on the Ray cluster's nodes for the Ray executor (engine/evolve/ray/executor.py): the GPU probe,
the compile task, the check-and-time task and the profile task. Each reads its request and writes its reply as
the typed envelopes of engine/evolve/ray/envelopes.py (their to_json: plain JSON, plus the packed build entry's
bytes), and says where it ran and when.

The driver ships the task as JSON plus its reference files (engine.tasks.portable) and the candidate as its
files, so a node needs kbench's Python dependencies and a CUDA toolkit, not the workspace or the task folder.
A bad candidate never makes a task raise: its verdicts say what went wrong. A task that raises (a malformed
request among them: an EnvelopeError naming the envelope and the field) is the machinery's failure, which the
executor retries (engine/evolve/ray/jobs.py) and, with no attempts left, reports with that error.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

# The one guarded import of Ray: the other ray_* modules take `ray` from here, so a machine without Ray gets
# this one message whichever of them is imported first.
try:
    import ray
    import ray.exceptions
except ImportError as exc:  # pragma: no cover - exercised where ray is missing
    raise ImportError("the Ray executor needs Ray: pip install 'kbench[ray]' (or pip install ray)") from exc

from engine.candidates import Candidate
from engine.evolve.outcome import EvalOutcome
from engine.evolve.ray.envelopes import (BuildReply, BuildRequest, Built, EvalRequest, GpuReply, ProbeReply,
                                         ProfileReply, Ran, Where)
from engine.evolve.worker_fns import default_gpu, default_profile
from engine.harness.build.archive import pack_entry, unpack_entry
from engine.harness.build.cache import entry_dir
from engine.harness.build.result import BuildSummary
from engine.harness.build.stage import build_candidate
from engine.harness.toolchain import ToolchainError, detect
from engine.pipeline.eval_types import EvalOptions, default_cache_root
from engine.tasks.model import Task
from engine.tasks.portable import unpack_task
from engine.verdict import Verdict

BuildFn = Callable[[dict[str, Any], str, float], dict[str, Any]]   # engine.evolve.worker_fns.default_build's shape
GpuFn = Callable[[Task, Candidate, str, EvalOptions], EvalOutcome]
ProfileFn = Callable[[Task, Candidate, str, EvalOptions, dict[str, Any] | None], Verdict]


def _where() -> Where:
    ctx = ray.get_runtime_context()
    return Where(node=ctx.get_node_id(), host=os.uname().nodename, pid=os.getpid(),
                 cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))


def _ran(t0: float) -> Ran:
    return Ran(_where(), t0, time.time())


def probe_job() -> dict[str, Any]:
    """On a GPU node: the architectures builds should target, and what the node is (a ProbeReply)."""
    try:
        tc = detect()
    except ToolchainError as exc:
        return ProbeReply(_where(), error=str(exc)).to_json()
    return ProbeReply(_where(), archs=";".join(tc.archs), toolchain_key=tc.key()).to_json()


def build_job(request: dict[str, Any], build_fn: BuildFn | None = None) -> dict[str, Any]:
    """Compile (or find in this node's cache) and pack the entry for the GPU node: a BuildRequest in, a
    BuildReply out. Never raises for a bad candidate: the build's summary says what went wrong."""
    t0 = time.time()
    req = BuildRequest.from_json(request)
    cache = default_cache_root()
    if build_fn is not None:            # tests: a stand-in compiler, whose summary may leave fields out
        summary = BuildSummary.from_json(build_fn(req.candidate.to_json(), str(cache), req.timeout_s))
        return BuildReply(Built(summary), _ran(t0)).to_json()
    try:
        tc = detect(archs=req.archs or None)
    except ToolchainError as exc:
        failed = BuildSummary(ok=False, error=str(exc), seconds=time.time() - t0)
        return BuildReply(Built(failed), _ran(t0)).to_json()
    cand = req.candidate
    r = build_candidate(cand, cache, tc, timeout_s=req.timeout_s)
    archive = None
    if r.ok and cand.format != "kernelbench":
        archive = pack_entry(entry_dir(cache, tc, cand))
    return BuildReply(Built(BuildSummary.of(r), archive, tc.key()), _ran(t0)).to_json()


def worker_inputs(request: dict[str, Any]) -> tuple[EvalRequest, EvalOptions, Task]:
    """The request, its options as this node evaluates with them, and the task unpacked here."""
    req = EvalRequest.from_json(request)
    # The one conversion of shipped options: cache_root and gpu name the driver's cache folder and GPU index;
    # here the cache is this node's, and the GPU the one Ray gave the task (CUDA_VISIBLE_DEVICES).
    opts = replace(req.options, cache_root=default_cache_root(), gpu=None)
    task = unpack_task(req.task, Path(tempfile.gettempdir()) / "kbench-ray-tasks")
    return req, opts, task


def gpu_job(request: dict[str, Any], gpu_fn: GpuFn | None = None) -> dict[str, Any]:
    """Install the shipped build, then check and time the candidate on this task's GPU: an EvalRequest in, a
    GpuReply out."""
    t0 = time.time()
    req, opts, task = worker_inputs(request)
    note = ""
    built = req.built
    if built is not None and built.archive:
        key = detect(archs=req.archs or None).key()
        if key == built.toolchain_key:
            unpack_entry(built.archive, opts.cache_root, key, req.candidate.source_hash)
        else:
            note = "the compile node's toolchain differs from this GPU node's: compiled again here"
    out = (gpu_fn or default_gpu)(task, req.candidate, req.direction, opts)
    if note:
        out.data["ray_note"] = note
    return GpuReply(out, _ran(t0)).to_json()


def profile_job(request: dict[str, Any], profile_fn: ProfileFn | None = None) -> dict[str, Any]:
    """The profile stage alone for a candidate evaluated before (a new best), on this task's GPU: the build
    comes from this node's cache, or is compiled here. An EvalRequest (with the evaluation's device) in, a
    ProfileReply out."""
    t0 = time.time()
    req, opts, task = worker_inputs(request)
    v = (profile_fn or default_profile)(task, req.candidate, req.direction, opts, req.device)
    return ProfileReply(v, _ran(t0)).to_json()
