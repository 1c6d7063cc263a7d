"""evaluate() with the build and the judge replaced (no compiler, no GPU): the judge stand-in answers what the
request asked for, correct on every config it checks and timed on the configs it was asked to time, so a test
can see which configs a path asked the judge to time."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from engine.pipeline import evaluate as ev
from engine.pipeline.protocol.result import JudgeOutcome
from engine.procs import ChildOutcome

STATS = {"median_ms": 0.1, "iqr_ms": 0.001, "mean_ms": 0.1, "min_ms": 0.099, "n": 200, "all_streams_ms": 0.1}


def judge_answer(request: dict[str, Any]) -> dict[str, Any]:
    """What a judge finds for `request` (JudgeRequest.to_json()) when the candidate is correct and 2x eager."""
    names = [c["name"] for c in request["task"]["configs"] if not request["configs"] or c["name"] in request["configs"]]
    timed = [n for n in names if not request["timing_configs"] or n in request["timing_configs"]]
    return {"finished": True, "device": {"gpu": "test GPU"},
            "correctness": {n: {"ok": True, "reason": "", "max_abs_err": 0.0} for n in names},
            "timing": {n: {"candidate": STATS, "hidden_work": False, "eager": {**STATS, "median_ms": 0.2},
                           "speedup_eager": 2.0, "baselines": {"source": "measured"}} for n in timed},
            "integrity": {n: {"ok": True, "hack": None, "reason": "", "checks": []} for n in names}}


def fake_judge(monkeypatch, tmp_path) -> list[dict[str, Any]]:
    """Replace the build, the timer and the judge of engine.pipeline.evaluate; returns the list that collects
    each judge request (as JSON) evaluate() makes from then on. The roofline step (which would measure the
    GPU's peaks) is left out; a GPU counts as visible, so that evaluate() asks the judge."""
    build = SimpleNamespace(ok=True, seconds=0.0, cache_hit=True, module_name="kb_x", so_path=tmp_path / "x.so",
                            error="", log="")
    monkeypatch.setattr("engine.harness.build.stage.build_candidate", lambda *a, **k: build)
    monkeypatch.setattr("engine.pipeline.timer.build_timer",
                        lambda *a, **k: SimpleNamespace(so_path=tmp_path / "t.so", module_name="t"))
    monkeypatch.setattr("engine.pipeline.verdicts.roofline", lambda *a, **k: None)
    monkeypatch.setattr(ev, "no_gpu_visible", lambda gpu=None: None)     # the stand-in judge is the GPU
    requests: list[dict[str, Any]] = []

    def judge(request, opts):
        requests.append(request.to_json())
        return JudgeOutcome.of(ChildOutcome(judge_answer(requests[-1]), 0, False, 1.0, ""))
    monkeypatch.setattr(ev, "_run_judge", judge)
    return requests
