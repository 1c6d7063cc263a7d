"""GPU: robust-kbench's published kernels, unmodified, on kbench's built-in robust-kbench tasks, and kbench's
baselines on robust-kbench's own task folders. Needs a checkout of SakanaAI/robust-kbench (its `highlighted/` kernels
and `tasks/` folders are not kbench's to ship) named by ROBUST_KBENCH_CHECKOUT; skipped without it or without a GPU.

    ROBUST_KBENCH_CHECKOUT=/path/to/robust-kbench python -m pytest -q -m gpu tests/pipeline/test_gpu_published.py -rA

What proves the change: no published kernel fails with `incompatible function arguments` (mnist_linear and
mnist_pool backward did), every one passes or fails with a named fault of its own, and every baseline passes on
upstream's folder of its task (layernorm backward included: upstream passes normalized_shape after eps, as the
built-in task does). The whole table, timed: scripts/bench_vs_published.py CHECKOUT.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.candidates import load_candidate
from engine.pipeline.eval_types import EvalOptions
from engine.pipeline.evaluate import evaluate
from engine.tasks.loader import builtin_task_names, load_task
from engine.tasks.model import direction_configs
from tests.tasks.test_published_entry_points import PUBLISHED

pytestmark = pytest.mark.gpu

CHECKOUT = Path(os.environ.get("ROBUST_KBENCH_CHECKOUT", "/nonexistent"))
needs_checkout = pytest.mark.skipif(not (CHECKOUT / "highlighted").is_dir(),
                                    reason="ROBUST_KBENCH_CHECKOUT names no robust-kbench checkout")
ARGUMENT_ERRORS = ("incompatible function arguments", "TypeError")


def _opts(configs):
    return EvalOptions(configs=configs, timing=False, trials=1, baselines=("eager",), profile=False,
                       override_static=True)


def _said(report) -> str:
    return " | ".join(f"{v.stage} {v.status.value}: {v.reason}" for v in report.verdicts)


@needs_checkout
@pytest.mark.parametrize("name, direction", PUBLISHED, ids=lambda x: str(x))
def test_published_kernel_runs_on_the_builtin_task(name, direction):
    task = load_task(name)
    configs = [c for c in direction_configs(task, direction) if c.startswith("rkb-")]
    rep = evaluate(task, load_candidate(CHECKOUT / "highlighted" / name / direction / "kernel.cu"), direction,
                   _opts(configs))
    said = _said(rep)
    print(f"PUBLISHED-ON-BUILTIN {name} {direction}: passed={rep.passed} {said[:600]}")
    assert not any(e in said for e in ARGUMENT_ERRORS), said
    corr = rep.verdict("correctness")
    assert corr is not None and corr.status.value in ("pass", "fail") and corr.reason, said


def _baseline_pairs():
    return [(n, d) for n in builtin_task_names() for d in ("forward", "backward")
            if (CHECKOUT / "tasks" / n / f"func_{d}.py").is_file() and load_task(n).baseline_dir(d) is not None]


@needs_checkout
@pytest.mark.parametrize("name, direction", _baseline_pairs(), ids=lambda x: str(x))
def test_baseline_passes_on_upstreams_folder(name, direction):
    task = load_task(CHECKOUT / "tasks" / name)
    rep = evaluate(task, load_candidate(load_task(name).baseline_dir(direction)), direction,
                   _opts(direction_configs(task, direction)))
    print(f"BASELINE-ON-FOLDER {name} {direction}: passed={rep.passed} {_said(rep)[:600]}")
    assert rep.verdict("correctness") is not None and rep.verdict("correctness").status.value == "pass", _said(rep)
