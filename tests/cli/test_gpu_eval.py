"""`kbench eval` end to end on a GPU: a correct and a wrong kernel, forward and backward, in each of the
three candidate formats. Runs the real CLI in a subprocess and reads its JSON report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import FIXTURES, REPO

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

FIX = FIXTURES
RKB_TASK = FIX / "robust_kbench" / "linear"
RKB = FIX / "robust_kbench" / "candidates"
KB = FIX / "kernelbench"
LAYERNORM = REPO / "tasks" / "layernorm_lastdim" / "baselines"


def kbench_eval(task: str | Path, candidate: str | Path, *extra: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "eval", str(task), str(candidate), "--json",
                           "--no-compile-baseline", *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))})
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def _mutated(src: Path, dst: Path, old: str, new: str) -> Path:
    """A copy of a native candidate with one realistic bug planted (the replacement must apply)."""
    dst.mkdir(parents=True)
    planted = False
    for f in src.iterdir():
        text = f.read_text()
        if old in text:
            text = text.replace(old, new)
            planted = True
        (dst / f.name).write_text(text)
    assert planted, f"{old!r} not found in {src}"
    return dst


def _verdict(report: dict, stage: str) -> dict:
    return next(v for v in report["verdicts"] if v["stage"] == stage)


# -- native split format -----------------------------------------------------------------------------------

def test_native_forward_correct_passes_and_is_timed():
    rc, rep = kbench_eval("layernorm_lastdim", LAYERNORM / "forward")
    assert rc == 0, rep
    assert rep["passed"] and _verdict(rep, "correctness")["status"] == "pass"
    assert _verdict(rep, "timing")["status"] == "pass"
    # the default times the `bench` config (and any tagged `timed`); every config is still checked
    assert rep["timed_by"] == "default"
    timed = [c for c in rep["configs"] if c["timed"]]
    assert [c["name"] for c in timed] == ["bench"], [c["name"] for c in timed]
    assert all(c["candidate_ms"] and c["eager_ms"] for c in timed)
    assert all(c["correct"] and c["candidate_ms"] is None for c in rep["configs"] if not c["timed"])
    assert rep["device"]["gpu"]


def test_native_forward_wrong_fails_with_a_reason(tmp_path):
    # Biased variance (divide by n-1): a plausible slip that only a numerical check catches.
    bad = _mutated(LAYERNORM / "forward", tmp_path / "bad", "block_sum(ss, shared) / n + eps",
                   "block_sum(ss, shared) / (n - 1) + eps")
    rc, rep = kbench_eval("layernorm_lastdim", bad)
    assert rc == 1 and not rep["passed"]
    v = _verdict(rep, "correctness")
    assert v["status"] == "fail" and "outside atol" in v["reason"]


def test_native_backward_correct_passes():
    rc, rep = kbench_eval("layernorm_lastdim", LAYERNORM / "backward", "--backward", "--no-timing")
    assert rc == 0, _verdict(rep, "correctness")


def test_native_backward_wrong_grad_bias_fails(tmp_path):
    bad = _mutated(LAYERNORM / "backward", tmp_path / "bad", "acc_b += gv;", "acc_b += (r > r0) ? gv : 0.f;")
    rc, rep = kbench_eval("layernorm_lastdim", bad, "--backward", "--no-timing")
    assert rc == 1
    assert "output 2" in _verdict(rep, "correctness")["reason"]  # grad_bias is the third gradient


# -- robust-kbench single .cu ---------------------------------------------------------------------------------

@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_robust_kbench_correct_passes(direction):
    flags = ["--backward"] if direction == "backward" else []
    rc, rep = kbench_eval(RKB_TASK, RKB / f"linear_{direction}_correct.cu", "--no-timing", *flags)
    assert rc == 0, _verdict(rep, "correctness")


def test_robust_kbench_wrong_forward_fails_exactly_on_odd_in_features():
    rc, rep = kbench_eval(RKB_TASK, RKB / "linear_forward_wrong.cu", "--no-timing")
    assert rc == 1
    from engine.tasks.loader import load_task
    odd = {c.name for c in load_task(RKB_TASK).configs if c.input_kwargs["in_features"] % 2}
    failed = {c["name"] for c in rep["configs"] if c["correct"] is False}
    assert failed == odd


def test_robust_kbench_wrong_backward_fails():
    rc, rep = kbench_eval(RKB_TASK, RKB / "linear_backward_wrong.cu", "--backward", "--no-timing")
    assert rc == 1 and _verdict(rep, "correctness")["status"] == "fail"


# -- KernelBench ModelNew -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("candidate, passes", [("matmul_relu_correct", True), ("matmul_relu_wrong", False)])
def test_kernelbench_modelnew(candidate, passes):
    rc, rep = kbench_eval(KB / "matmul_relu.py", KB / "candidates" / f"{candidate}.py", "--no-timing")
    assert (rc == 0) == passes, _verdict(rep, "correctness")
    if not passes:
        assert _verdict(rep, "correctness")["status"] == "fail"


def test_kernelbench_modelnew_that_does_not_compile_fails_the_compile_stage():
    rc, rep = kbench_eval(KB / "scaled_swish.py", KB / "candidates" / "scaled_swish_compile_error.py", "--no-timing")
    assert rc == 1 and not rep["passed"]
    v = _verdict(rep, "compile")
    assert v["status"] == "fail" and 'identifier "scal" is undefined' in v["reason"], v
    assert not any(x["stage"] == "correctness" for x in rep["verdicts"])


def test_kernelbench_modelnew_built_by_the_compile_stage_is_reused(tmp_path):
    """The compile stage builds the load_inline extension without a GPU; the sandbox's import finds it up to date
    (same TORCH_EXTENSIONS_DIR and arch list) instead of compiling again."""
    rc, rep = kbench_eval(KB / "scaled_swish.py", KB / "candidates" / "scaled_swish_correct.py", "--no-timing")
    assert rc == 0, rep
    assert _verdict(rep, "compile")["status"] == "pass" and _verdict(rep, "correctness")["status"] == "pass"
    assert rep["seconds"] - rep["build"]["seconds"] < 60, rep   # no second 60-80 s nvcc run in the sandbox
