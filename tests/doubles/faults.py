"""Fault doubles for the executors' tests: a `profile_fn` stand-in that says which GPU it was given, and a GPU
stage that can record its worker and hold an attempt, so a test can kill the worker or its Ray node mid-run."""

from __future__ import annotations

import os
import re
import sys
import time
from typing import Any

from engine.candidates import Candidate
from engine.evolve.outcome import EvalOutcome
from engine.pipeline.eval_types import EvalOptions
from engine.tasks.model import Task
from engine.verdict import Verdict
from tests.doubles.evaluator import fake_gpu, fake_profile


def fake_profile_stage(task: Task, candidate: Candidate, direction: str, options: EvalOptions,
                       device: dict[str, Any] | None = None) -> Verdict:
    """The executors' `profile_fn` stand-in (module level: picklable for Ray); says which GPU it was given."""
    v = fake_profile(candidate)
    v.data.update(gpu_index=getattr(options, "gpu", None), device=dict(device or {}))
    return v


def fault_gpu(task: Task, candidate: Candidate, direction: str, options: EvalOptions,
              sleep_s: float = 0.0) -> EvalOutcome:
    """tests.doubles.evaluator.fake_gpu with the fault tests' hooks, steered by markers in the source:
    `FAKE_PIDFILE=<path>` appends a line "<pid> <ray node id or ->" per attempt; `FAKE_GPU_SLEEP=<s>` then holds
    the first `FAKE_SLEEP_ATTEMPTS=<n>` attempts (default 1) there, so a test can kill the worker or its node
    mid-evaluation. Module level; Ray's workers get it by value (register_pickle_by_value of this module and
    tests.doubles.evaluator)."""
    text = "".join(candidate.files.values())
    attempt = 1
    if m := re.search(r"FAKE_PIDFILE=(\S+)", text):
        node = "-"
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            node = ray.get_runtime_context().get_node_id()
        with open(m.group(1), "a+") as f:
            f.seek(0)
            attempt = len(f.read().splitlines()) + 1
            f.write(f"{os.getpid()} {node}\n")
    if m := re.search(r"FAKE_GPU_SLEEP=([0-9.]+)", text):
        n = re.search(r"FAKE_SLEEP_ATTEMPTS=(\d+)", text)
        if attempt <= (int(n.group(1)) if n else 1):
            time.sleep(float(m.group(1)))
    return fake_gpu(task, candidate, direction, options, sleep_s=sleep_s)
