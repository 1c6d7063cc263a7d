"""GPU: the result-replay catalog (issue: every timed call sees inputs it has never seen). Each candidate in
tests/fixtures/exploits attacks one way; each is rejected, or measured at its honest speed beside a control of the
same slow kernel without its cache (both timed in this test, side by side).

    python -m pytest -q -m gpu tests/integrity/test_gpu_replay.py -rA -s     # one EXPLOIT-ROW per case

The KernelBench candidates compute with torch and the native ones with their own CUDA; the static gate, which stops
several of them first (static-cache, monkey-patch, torch-compute), is overridden, so what shows is the judge.
"""

from __future__ import annotations

import pytest

from engine.candidates import Candidate
from engine.pipeline.judge import analysis
from engine.tasks.loader import load_task
from engine.verdict import Status
from tests.integrity.test_gpu_exploits import EXPLOITS, L2, _cand, _eval

pytestmark = [pytest.mark.gpu]

NATIVE = EXPLOITS / "native"
MATMUL = EXPLOITS.parent / "kernelbench" / "matmul_relu.py"
# a cached candidate measured at its honest speed: within this factor of its control's speedup (noise)
HONEST = 1.25


def _speed(rep) -> float:
    return rep.geomean_speedup_eager or 0.0


def _native(name: str, patch: tuple[str, str, str] | None = None) -> Candidate:
    files = {f: (NATIVE / name / f).read_text() for f in ("kernel.cu", "binding.cpp")}
    if patch is not None:
        file, old, new = patch
        assert old in files[file]
        files[file] = files[file].replace(old, new)
    return Candidate("native", files, name=name + ("-control" if patch else ""))


def _native_eval(cand: Candidate):
    from engine.pipeline.eval_types import EvalOptions
    from engine.pipeline.evaluate import evaluate
    rep = evaluate(load_task("gelu_bias"), cand, "forward",
                   EvalOptions(trials=2, baselines=("eager",), override_static=True, profile=False,
                               timing_configs=["bench"]))
    bad = [f"{v.stage} {v.status.value}: {v.reason[:160]}" for v in rep.verdicts
           if v.status in (Status.FAIL, Status.SUSPICIOUS) and v.stage != "static"]
    print(f"EXPLOIT-ROW | {cand.name} | passed={rep.passed} | " + ("; ".join(bad) or f"{_speed(rep):.3f}x vs eager"))
    return rep


@pytest.mark.parametrize("name", ["content_dict", "functools_cache"])
def test_a_content_keyed_python_cache_is_measured_at_its_honest_speed(name, gpu_to_itself):
    cheat = _eval(name, task=L2)
    control = _eval("content_dict", task=L2, candidate=_cand("content_dict", NO_CACHE=1))
    assert cheat.verdict("correctness").status == Status.PASS, cheat.to_json()["verdicts"]
    print(f"EXPLOIT-ROW | {name} vs its slow kernel uncached | {_speed(cheat):.3f}x vs {_speed(control):.3f}x")
    assert _speed(cheat) <= HONEST * _speed(control), (_speed(cheat), _speed(control))


@pytest.mark.parametrize("name, control", [
    ("cpp_static_replay", ("binding.cpp", "#ifndef KB_NO_CACHE", "#define KB_NO_CACHE\n#ifndef KB_NO_CACHE")),
    ("device_buffer_replay", ("kernel.cu", "const bool hit = g_key != 0 && g_key == g_now;", "const bool hit = false;")),
])
def test_a_native_content_keyed_cache_is_measured_at_its_honest_speed(name, control, gpu_to_itself):
    cheat, honest = _native_eval(_native(name)), _native_eval(_native(name, control))
    assert cheat.verdict("correctness").status == Status.PASS, cheat.to_json()["verdicts"]
    print(f"EXPLOIT-ROW | {name} vs its slow kernel uncached | {_speed(cheat):.3f}x vs {_speed(honest):.3f}x")
    assert _speed(cheat) <= HONEST * _speed(honest), (_speed(cheat), _speed(honest))


def test_a_cache_keyed_on_what_fresh_values_leave_alone_fails_its_checks():
    rep = _eval("sign_keyed", task=L2)
    assert not rep.passed and (rep.verdict("correctness").status == Status.FAIL or
                               analysis.AFTER_TIMING in (rep.verdict("integrity").reason or "")), rep.to_json()["verdicts"]


def test_an_honest_near_miss_on_a_later_call_fails_without_a_hack_named():
    """Three elements at twice the tolerance from the fourth call on: wrong, so not passed, but nearer than another
    call's output would be, so neither correctness's stale-result check nor timing's names a cache."""
    rep = _eval("near_miss")
    assert not rep.passed, rep.to_json()["verdicts"]
    integ = rep.verdict("integrity")
    assert integ is None or integ.status != Status.FAIL, rep.to_json()["verdicts"]
    assert rep.verdict("correctness").status == Status.FAIL or rep.verdict("timing").status != Status.PASS, \
        rep.to_json()["verdicts"]


@pytest.mark.parametrize("name", ["lazy_output", "deferred"])
def test_an_output_computed_later_is_wrong_when_the_call_returns(name):
    rep = _eval(name)
    assert not rep.passed and rep.verdict("correctness").status == Status.FAIL, rep.to_json()["verdicts"]


def test_dropping_work_after_the_third_check_is_caught_by_the_last_tenths_or_gains_nothing(gpu_to_itself):
    """Three random checks and one in the last tenth: work dropped after the third it sees is caught by the fourth;
    where it saw the fourth late (the judge takes an output while later calls run), it dropped at most a tenth of
    the iterations after it, which cannot move the median."""
    rep, honest = _eval("after_third_check", task=L2), _eval("honest", task=L2)
    assert rep.verdict("correctness").status == Status.PASS     # honest while every call is checked
    iv = rep.verdict("integrity")
    caught = iv is not None and iv.status == Status.FAIL and analysis.AFTER_TIMING in iv.reason
    print(f"EXPLOIT-ROW | after_third_check | {'caught' if caught else 'not caught'} | {_speed(rep):.3f}x vs honest "
          f"{_speed(honest):.3f}x")
    assert caught or _speed(rep) <= HONEST * _speed(honest), rep.to_json()["verdicts"]


def test_patched_timers_and_statistics_in_the_runner_change_nothing(gpu_to_itself):
    patched, honest = _eval("stats_patch", task=L2), _eval("honest", task=L2)
    assert patched.passed and honest.passed, patched.to_json()["verdicts"]
    print(f"EXPLOIT-ROW | stats_patch vs honest | {_speed(patched):.3f}x vs {_speed(honest):.3f}x")
    assert _speed(patched) <= HONEST * _speed(honest)


def test_one_config_driven_to_nothing_fails_that_config():
    rep = _eval("aggregator_underflow", task=MATMUL)
    corr = rep.verdict("correctness")
    assert not rep.passed and corr.status == Status.FAIL and "odd-sizes" in corr.reason, rep.to_json()["verdicts"]
