"""What runs on the Ray cluster's nodes for the Ray executor (engine/evolve/ray_executor.py): the GPU probe,
the compile task, the check-and-time task and the profile task. Each takes and returns plain JSON (plus the
packed build entry's bytes) and says where it ran and when.

The driver ships the task as JSON plus its reference files (engine.tasks.portable) and the candidate as its
files, so a node needs kbench's Python dependencies and a CUDA toolkit, not the workspace or the task folder.
A bad candidate never makes a task raise: its verdicts say what went wrong. A task that raises is the
machinery's failure, which the executor retries (engine/evolve/ray_jobs.py).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import fields
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
from engine.evolve.worker_fns import default_gpu, default_profile
from engine.harness.build import build_candidate, entry_dir
from engine.harness.build_archive import pack_entry, unpack_entry
from engine.harness.build_result import BuildSummary
from engine.harness.toolchain import ToolchainError, detect
from engine.pipeline.evaluate import EvalOptions, default_cache_root
from engine.tasks.model import Task
from engine.tasks.portable import unpack_task


def _worker_cache(cache_root: str | None) -> Path:
    return Path(cache_root) if cache_root else default_cache_root()


def _where() -> dict[str, Any]:
    ctx = ray.get_runtime_context()
    return {"node": ctx.get_node_id(), "host": os.uname().nodename, "pid": os.getpid(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def probe_job() -> dict[str, Any]:
    """On a GPU node: the architectures builds should target, and what the node is."""
    out: dict[str, Any] = {"where": _where()}
    try:
        tc = detect()
        out.update(archs=";".join(tc.archs), toolchain_key=tc.key())
    except ToolchainError as exc:
        out["error"] = str(exc)
    return out


def build_job(candidate_json: dict[str, Any], cache_root: str | None, timeout_s: float, archs: str | None,
              build_fn: Callable[..., dict[str, Any]] | None) -> dict[str, Any]:
    """Compile (or find in this node's cache) and pack the entry for the GPU node. Never raises for a bad
    candidate: the compile verdict says what went wrong."""
    t0 = time.time()
    cand = Candidate.from_json(candidate_json)
    if build_fn is not None:            # tests: a stand-in compiler
        res = build_fn(candidate_json, str(_worker_cache(cache_root)), timeout_s)
        return {"build": res, "archive": None, "toolchain_key": "", "where": _where(), "start": t0, "end": time.time()}
    cache = _worker_cache(cache_root)
    try:
        tc = detect(archs=archs or None)
    except ToolchainError as exc:
        return {"build": BuildSummary(ok=False, error=str(exc), seconds=time.time() - t0).to_json(),
                "archive": None, "toolchain_key": "", "where": _where(), "start": t0, "end": time.time()}
    r = build_candidate(cand, cache, tc, timeout_s=timeout_s)
    archive = None
    if r.ok and cand.format != "kernelbench":
        archive = pack_entry(entry_dir(cache, tc, cand))
    return {"build": BuildSummary.of(r).to_json(),
            "archive": archive, "toolchain_key": tc.key(), "source_hash": cand.source_hash,
            "where": _where(), "start": t0, "end": time.time()}


def _worker_inputs(packed_task: dict[str, Any], candidate_json: dict[str, Any],
                   options_json: dict[str, Any]) -> tuple[EvalOptions, Task, Candidate]:
    """(EvalOptions, task, candidate) on a worker, from what the driver shipped."""
    known = {f.name for f in fields(EvalOptions)}
    opts = EvalOptions(**{k: v for k, v in options_json.items() if k in known},
                       cache_root=_worker_cache(options_json.get("cache_root")))
    task = unpack_task(packed_task, Path(tempfile.gettempdir()) / "kbench-ray-tasks")
    return opts, task, Candidate.from_json(candidate_json)


def gpu_job(packed_task: dict[str, Any], candidate_json: dict[str, Any], direction: str,
            options_json: dict[str, Any], built: dict[str, Any] | None,
            gpu_fn: Callable[..., Any] | None) -> dict[str, Any]:
    """Install the shipped build, then check and time the candidate on this task's GPU. The outcome as JSON,
    with where it ran and when."""
    t0 = time.time()
    opts, task, cand = _worker_inputs(packed_task, candidate_json, options_json)
    note = ""
    if built and built.get("archive"):
        key = detect(archs=options_json.get("archs") or None).key()
        if key == built.get("toolchain_key"):
            unpack_entry(built["archive"], opts.cache_root, key, cand.source_hash)
        else:
            note = "the compile node's toolchain differs from this GPU node's: compiled again here"
    out = (gpu_fn or default_gpu)(task, cand, direction, opts)
    if note:
        out.data["ray_note"] = note
    return {"outcome": out.to_json(), "where": _where(), "start": t0, "end": time.time()}


def profile_job(packed_task: dict[str, Any], candidate_json: dict[str, Any], direction: str,
                options_json: dict[str, Any], device: dict[str, Any] | None,
                profile_fn: Callable[..., Any] | None) -> dict[str, Any]:
    """The profile stage alone for a candidate evaluated before (a new best), on this task's GPU: the build
    comes from this node's cache, or is compiled here. The verdict as JSON, with where it ran and when."""
    t0 = time.time()
    opts, task, cand = _worker_inputs(packed_task, candidate_json, options_json)
    v = (profile_fn or default_profile)(task, cand, direction, opts, device)
    return {"verdict": v.to_json(), "where": _where(), "start": t0, "end": time.time()}
