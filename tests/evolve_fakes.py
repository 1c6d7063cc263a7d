"""Evolution test doubles that no production path runs (the fake evaluator itself is engine.evolve.fake: the
app's demo and `--fake-evaluator` run it too)."""

from __future__ import annotations

from typing import Any

from engine.candidates import Candidate
from engine.evolve.fake import fake_profile
from engine.pipeline.evaluate import EvalOptions
from engine.tasks.model import Task
from engine.verdict import Verdict


def fake_profile_stage(task: Task, candidate: Candidate, direction: str, options: EvalOptions,
                       device: dict[str, Any] | None = None) -> Verdict:
    """The executors' `profile_fn` stand-in (module level: picklable for Ray); says which GPU it was given."""
    v = fake_profile(candidate)
    v.data.update(gpu_index=getattr(options, "gpu", None), device=dict(device or {}))
    return v
