"""Profile child: `python -m engine.pipeline.runner.profile_child REQUEST.json`, run jailed like a runner
(engine/jail/exec.py puts it in the jail before Python starts; under ncu for the ncu part). Modes: `ncu` runs the
candidate on one config a few times and exits (ncu collects);
`torch` records the top device-time ops of the candidate and of the eager reference with torch.profiler."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from engine.harness.numerics import JUDGE, apply
from engine.harness.runtimes import runtime_for
from engine.pipeline.protocol import messages as msg
from engine.pipeline.protocol.profile_types import OpRow, ProfileRequest, ProfileResult
from engine.pipeline.runner.main import load_candidate
from engine.profile.ncu import NVTX_RANGE
from engine.tasks.model import Task


def top_device_ops(fn: Any, top: int = 8, runs: int = 3) -> list[OpRow]:
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        # Kernels (and copies) are the events with their own device time; aten:: ops only aggregate them.
        dev = float(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0) or 0)
        if dev > 0:
            rows.append(OpRow(name=e.key[:120], device_us=dev / runs, calls=max(1, int(e.count) // runs)))
    rows.sort(key=lambda r: -r.device_us)
    return rows[:top]


def run(request: ProfileRequest) -> ProfileResult:
    task = Task.from_json(request.task)
    cfg = next(c for c in task.configs if c.name == request.config)
    if not torch.cuda.is_available():
        return ProfileResult(error="no CUDA GPU is visible to the profiler")
    device = torch.device("cuda")
    apply(JUDGE)   # as in the runner: the settings the candidate was judged under, before its import
    runtime = runtime_for(task, request.direction)
    module = load_candidate(msg.parse_as(request.candidate, msg.Load))   # runner_process.stage_candidate's
    runtime.setup(cfg, cfg.seed, device)
    cand = runtime.candidate_callable(module)
    if request.mode == "ncu":
        for _ in range(int(request.launches)):
            torch.cuda.nvtx.range_push(NVTX_RANGE)
            cand()
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        return ProfileResult(ok=True)
    return ProfileResult(ok=True, candidate_ops=top_device_ops(cand),
                         reference_ops=top_device_ops(runtime.eager_callable()))


def main(argv: list[str]) -> int:
    request = ProfileRequest.from_json(json.loads(Path(argv[1]).read_text()))
    try:
        result = run(request)
    except Exception as exc:  # noqa: BLE001 - the candidate is untrusted; report, don't crash silently
        result = ProfileResult(error=f"{type(exc).__name__}: {str(exc)[:800]}")
    Path(request.result_path).write_text(json.dumps(replace(result, finished=True).to_json(), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
