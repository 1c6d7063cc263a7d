"""GPU: robust-kbench's batchnorm fixture through `evaluate()`, the real helper and runner. Its forward_fn
(F.batch_norm in training mode) updates running_mean and running_var (inputs 3 and 4) in place: offered as the
candidate, it passes correctness, integrity and the timing job's checked iterations, and the verdict names the two
inputs; a candidate that leaves them alone fails naming input 3; one that writes into x (input 0, which the
reference leaves alone) fails as ever. The CPU counterpart: tests/pipeline/test_reference_mutation.py; the
corpus run over the robust-kbench fixtures (batchnorm among them): tests/pipeline/test_gpu_corpus.py.

    python -m pytest -q -m gpu tests/pipeline/test_gpu_reference_mutation.py -rA
"""

from __future__ import annotations

import pytest

from engine.candidates import Candidate
from engine.pipeline.eval_types import EvalOptions
from engine.pipeline.evaluate import evaluate
from engine.tasks.loader import load_task
from engine.verdict import Status
from tests.paths import FIXTURES

pytestmark = pytest.mark.gpu

BN = FIXTURES / "robust_kbench" / "batchnorm"
OWN = "\n\nforward = forward_fn\n"
UNTOUCHED = ("\n\ndef forward(x, weight, bias, running_mean, running_var, training, momentum, eps):\n"
             "    return F.batch_norm(x, running_mean.clone(), running_var.clone(), weight, bias, training, momentum,"
             " eps)\n")
SCALES_X = ("\n\ndef forward(x, weight, bias, running_mean, running_var, training, momentum, eps):\n"
            "    y = F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)\n"
            "    x.mul_(2)\n    return y\n")


@pytest.fixture(autouse=True)
def _need_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")


def _eval(tail: str, timing: bool = False):
    source = (BN / "func_forward.py").read_text() + tail + "\n\nclass ModelNew(Model):\n    pass\n"
    return evaluate(load_task(BN), Candidate("kernelbench", {"candidate.py": source}, name="bn"), "forward",
                    EvalOptions(trials=2, timing=timing, override_static=True, profile=False, roofline=False,
                                library_policy="engineering", baselines=("eager",)))


def _why(rep) -> list:
    return [(v.stage, v.status, v.reason) for v in rep.verdicts]


def test_its_own_reference_passes_and_the_verdict_names_the_inputs_it_mutates():
    rep = _eval(OWN, timing=True)
    c = rep.verdict("correctness")
    assert c is not None and c.status == Status.PASS, _why(rep)
    assert rep.verdict("integrity").status == Status.PASS, _why(rep)
    assert rep.verdict("timing").status != Status.FAIL, _why(rep)
    assert "inputs 3, 4 mutated in place by the reference" in c.reason, c.reason
    assert all(row["mutated_by_reference"] == [3, 4] for row in c.data["configs"].values()), c.data
    print("VERDICT-ROW batchnorm own reference:", c.reason)


def test_a_candidate_that_leaves_the_running_statistics_alone_fails_naming_input_3():
    c = _eval(UNTOUCHED).verdict("correctness")
    assert c.status == Status.FAIL and "input 3 (mutated in place by the reference) differs" in c.reason, c.reason


def test_a_candidate_that_writes_into_x_fails_as_before():
    c = _eval(SCALES_X).verdict("correctness")
    assert c.status == Status.FAIL and "modified input 0 in place" in c.reason, c.reason
