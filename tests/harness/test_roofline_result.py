"""The roofline child's result, typed (engine.harness.roofline.RooflineResult): get_peaks reads it back into Peaks
and caches them; a result it cannot read is a RuntimeError that says why (as any failed measurement is)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.harness import roofline
from engine.harness.roofline import Peaks, RooflineResult, cache_path, get_peaks, load_peaks
from engine.procs import ChildOutcome

PEAKS = Peaks("Fake GPU", copy_gbps=3000.0, fp32_tflops=50.0, tf32_tflops=400.0, measured_at=1.0)


def _child_leaving(monkeypatch: pytest.MonkeyPatch, result: Any, returncode: int = 0) -> None:
    def run_child(module: str, request: dict, **_: Any) -> ChildOutcome:
        assert module == "engine.harness.roofline"
        return ChildOutcome(result, returncode, False, 1.0, "tail")
    monkeypatch.setattr(roofline, "run_child", run_child)


def test_a_good_result_round_trips_and_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written = json.loads(json.dumps(RooflineResult(finished=True, peaks=PEAKS).to_json()))
    assert written == {"finished": True, "peaks": {"gpu": "Fake GPU", "copy_gbps": 3000.0, "fp32_tflops": 50.0,
                                                   "tf32_tflops": 400.0, "measured_at": 1.0}, "error": None}
    _child_leaving(monkeypatch, written)
    assert get_peaks(tmp_path, remeasure=True) == PEAKS
    assert cache_path(tmp_path, "Fake GPU").exists() and load_peaks(tmp_path, "Fake GPU") == PEAKS


@pytest.mark.parametrize("result, says", [
    (["not", "an", "object"], "the roofline child's result: expected a JSON object"),
    ({"finished": True, "peaks": {"gpu": "g", "copy_gbps": "fast"}}, "peaks.copy_gbps"),
    ({"finished": True, "peaks": None}, "the evaluator process exited with code 0"),
    ({"finished": True, "error": "no CUDA GPU is visible"}, "no CUDA GPU is visible"),
    ({}, "the evaluator process exited with code 0"),
])
def test_an_unreadable_or_failed_result_is_a_runtime_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           result: Any, says: str) -> None:
    _child_leaving(monkeypatch, result)
    with pytest.raises(RuntimeError, match="roofline measurement failed") as info:
        get_peaks(tmp_path, remeasure=True)
    assert says in str(info.value), str(info.value)
