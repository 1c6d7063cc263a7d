"""Every built-in task's baseline passes `kbench eval` on every config (correctness; timing is benchmarked
separately by scripts/bench_baselines.py)."""

from __future__ import annotations

import pytest

from engine.candidates import load_candidate
from engine.pipeline.eval_types import EvalOptions
from engine.pipeline.evaluate import evaluate
from engine.tasks.loader import builtin_task_names, load_task

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _cases():
    for name in builtin_task_names():
        task = load_task(name)
        for direction in task.directions:
            yield pytest.param(name, direction, id=f"{name}-{direction}",
                               marks=[] if task.baseline_dir(direction) else
                               pytest.mark.skip(reason=f"{name} has no {direction} baseline yet"))


@pytest.mark.parametrize("name, direction", list(_cases()))
def test_baseline_passes_every_config(name, direction):
    task = load_task(name)
    report = evaluate(task, load_candidate(task.baseline_dir(direction)), direction,
                      EvalOptions(timing=False, trials=2))
    failures = [f"{r.name}: {r.reason}" for r in report.rows if not r.correct]
    assert report.passed, "\n".join([v.reason for v in report.verdicts if not v.ok] + failures)
