"""Baselines measured once per session (engine/pipeline/baselines.py): what a request may reuse, what a
judge's result adds, and when everything is measured again. The judge's side (a quick re-timing that must
agree within 10 %) runs on a GPU: BENCHMARKS.md, "Warm judges"."""

from __future__ import annotations

import json

import pytest

from engine.harness.timing import TimingStats
from engine.pipeline.baselines import SessionBaselines, key_for
from engine.pipeline.protocol.result import JudgeResult
from engine.pipeline.protocol.types import CandidateSpec, JudgeRequest, SessionBaseline, TimerSpec

DEV = {"gpu": "H100", "driver": "580", "torch": "2.11", "cuda": "13.0"}


def _stats(ms: float) -> dict:
    return {"median_ms": ms, "iqr_ms": ms / 100, "mean_ms": ms, "min_ms": ms, "n": 100, "all_streams_ms": ms}


def _result(rows: dict, device=DEV, drift=None, **extra) -> JudgeResult:
    """A judge's result file as the judge writes it, read back as the parent reads it."""
    return JudgeResult.from_json(
        {"device": device, "timing": rows, "baseline_drift": drift or {}, "finished": True,
         "correctness": {n: {"ok": True} for n in rows}, "integrity": {n: {"ok": True} for n in rows}, **extra})


def _measured(eager_ms: float) -> dict:
    return {"candidate": _stats(1.0), "baselines": {"source": "measured"},
            "null": {"median_ms": 0.01, "gap_ms": 0.02}, "eager": _stats(eager_ms),
            "compile_error": "no inductor here"}


def _reused() -> dict:
    return {"candidate": _stats(1.0), "baselines": {"source": "session"}, "eager": _stats(0.2)}


def test_the_first_request_measures_then_later_ones_reuse_until_the_periodic_recheck():
    s = SessionBaselines(recheck_every=3)
    k = key_for({"name": "t"}, "forward", 0, ("eager", "compile"), {})
    assert s.for_request(k) is None                         # nothing known yet: measure
    s.update(k, _result({"bench": _measured(0.2)}))
    got = s.for_request(k)
    assert got == {"bench": SessionBaseline(eager=TimingStats(**_stats(0.2)), compile_error="no inductor here")}
    assert s.for_request(k) is not None                     # asking is not using: no evaluation came back yet
    s.update(k, _result({"bench": _reused()}))
    assert s.for_request(k) is not None                     # one reuse so far
    s.update(k, _result({"bench": _reused()}))
    assert s.for_request(k) is None                         # two reuses: the third evaluation measures in full
    s.update(k, _result({"bench": _measured(0.25)}))
    assert s.for_request(k)["bench"].eager.median_ms == 0.25


@pytest.mark.parametrize("taint", [
    {"error": "CUDA error while timing bench"},
    {"integrity": {"bench@timing": {"ok": False, "hack": "timer-forgery"}}},
    {"correctness": {"bench": {"ok": False}}},
    {"finished": False},
])
def test_a_tainted_evaluation_leaves_no_baselines_for_later_candidates(taint):
    s = SessionBaselines()
    k = key_for({"name": "t"}, "forward", 0, ("eager",), {})
    s.update(k, _result({"bench": _measured(9.0)}, **taint))
    assert s.for_request(k) is None
    s.update(k, _result({"bench": {**_measured(9.0), "hidden_work": True}}))
    assert s.for_request(k) is None


def test_reused_rows_add_nothing_drift_forgets_a_config_and_another_device_forgets_all():
    s = SessionBaselines()
    k = key_for({"name": "t"}, "forward", 0, ("eager",), {})
    s.for_request(k)
    s.update(k, _result({"a": _measured(0.2), "b": _measured(0.3)}))
    reused = {**_measured(9.9), "baselines": {"source": "session"}}  # reused rows are never stored
    s.update(k, _result({"a": reused}))
    assert s.for_request(k)["a"].eager.median_ms == 0.2
    s.update(k, _result({}, drift={"a": {"baseline": "eager", "now_ms": 0.3, "session_ms": 0.2}}))
    assert set(s.for_request(k)) == {"b"}
    s.update(k, _result({}, device={**DEV, "driver": "590"}))
    assert s.for_request(k) is None


def test_keys_separate_tasks_directions_gpus_and_protocols():
    base = key_for({"name": "t", "configs": [1]}, "forward", 0, ("eager",), {"budget_s": 0.4})
    others = [key_for({"name": "t", "configs": [2]}, "forward", 0, ("eager",), {"budget_s": 0.4}),
              key_for({"name": "t", "configs": [1]}, "backward", 0, ("eager",), {"budget_s": 0.4}),
              key_for({"name": "t", "configs": [1]}, "forward", 1, ("eager",), {"budget_s": 0.4}),
              key_for({"name": "t", "configs": [1]}, "forward", 0, ("eager", "compile"), {"budget_s": 0.4}),
              key_for({"name": "t", "configs": [1]}, "forward", 0, ("eager",), {"budget_s": 0.2})]
    assert len({base, *others}) == 6


def test_a_request_carries_the_session_baselines_to_the_judge():
    kept = {"bench": SessionBaseline(eager=TimingStats(**_stats(0.2)), compile_error="no inductor here")}
    req = JudgeRequest(task={"name": "t"}, direction="forward", candidate=CandidateSpec("native", "m", so_path="x"),
                       timer=TimerSpec("t.so", "t"), result_path="r", session_baselines=kept)
    back = JudgeRequest.from_json(json.loads(json.dumps(req.to_json())))
    assert back.session_baselines == kept and back == req


def test_a_result_file_the_parent_cannot_read_is_kbenchs_failure_not_an_exception():
    from engine.pipeline.protocol.result import JudgeOutcome
    from engine.procs import ChildOutcome
    bad = {"finished": True, "timing": {"bench": {"candidate": {"median_ms": "fast"}}}}
    out = JudgeOutcome.of(ChildOutcome(bad, 0, False, 1.0, ""))
    assert out.result.finished and "timing.bench.candidate" in out.result.error and "kbench failure" in out.result.error
    assert not out.result.clean()


def test_a_spares_standby_state_reads_typed_and_a_garbled_one_is_not_up():
    from engine.pipeline.protocol.result import StandbyState
    assert StandbyState.read(None) is None                       # nothing written yet: still warming up
    assert StandbyState.read({"ok": True, "why": None}) == StandbyState(True)
    down = StandbyState.read({"ok": False, "why": "FileNotFoundError: timer.so"})
    assert not down.ok and "FileNotFoundError" in down.why
    garbled = StandbyState.read({"ok": "yes please"})
    assert not garbled.ok and "standby state" in garbled.why
