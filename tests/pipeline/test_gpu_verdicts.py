"""GPU: fair verdicts end to end through `evaluate()`.

    python -m pytest -q -m gpu tests/pipeline/test_gpu_verdicts.py -rA

- A KernelBench-style softmax whose tolerance is vacuous (every output below atol): an honest ModelNew
  passes, one that writes only half the rows fails correctness with rows 8-15 named.
- Every built-in baseline still passes correctness under the scale-aware comparison (test_gpu_baselines
  covers timing; this one checks correctness only, on every config).
- The cuBLAS fixture under `--library-policy engineering`: the static stage passes with cuBLAS tagged, the
  build links cuBLAS, and the GEMM is correct on every config.
"""

from __future__ import annotations


import pytest

from engine.candidates import load_candidate
from engine.pipeline.eval_types import EvalOptions
from engine.pipeline.evaluate import evaluate
from engine.tasks.loader import load_task
from engine.verdict import Status
from tests.builtin_tasks import baselines
from tests.paths import FIXTURES

pytestmark = pytest.mark.gpu

VAC = FIXTURES / "kernelbench" / "vacuous"


@pytest.fixture(autouse=True)
def _need_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")


def _eval(task, cand, direction="forward", **kw):
    return evaluate(task, cand, direction, EvalOptions(timing=False, profile=False, **kw))


def test_half_filled_softmax_fails_under_a_vacuous_tolerance_and_names_the_rows():
    task = load_task(str(VAC / "softmax_wide.py"))
    ok = _eval(task, load_candidate(VAC / "softmax_correct.py"))
    assert ok.passed, [(v.stage, v.status, v.reason) for v in ok.verdicts]
    bad = _eval(task, load_candidate(VAC / "softmax_half_rows.py"))
    c = bad.verdict("correctness")
    assert c.status == Status.FAIL and "rows: 8-15" in c.reason and "entirely 0" in c.reason, c.reason
    print("VERDICT-ROW half-filled softmax:", c.reason)


@pytest.mark.parametrize("task_name,direction", list(baselines()))
def test_every_baseline_passes_the_scale_aware_comparison(task_name, direction):
    task = load_task(task_name)
    rep = _eval(task, load_candidate(task.baseline_dir(direction)), direction)
    c = rep.verdict("correctness")
    assert c is not None and c.status == Status.PASS, c.reason if c else rep.verdicts


def test_cublas_candidate_under_engineering_passes_static_and_compiles():
    task = load_task("mnist_linear")
    rep = _eval(task, load_candidate(FIXTURES / "hacks" / "vendor_cublas"),
                library_policy="engineering")
    st = rep.verdict("static")
    assert st.status == Status.PASS and "cuBLAS" in st.data["libraries"], st.reason
    assert rep.verdict("compile").status == Status.PASS, rep.verdict("compile").reason   # cuBLAS linked
    c = rep.verdict("correctness")
    assert c is not None and c.status == Status.PASS, c.reason if c else rep.verdicts
    print("VERDICT-ROW cublas under engineering:", [(v.stage, v.status.value, v.reason[:120]) for v in rep.verdicts])
