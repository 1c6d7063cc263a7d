"""The disk cache of baselines (engine/pipeline/baseline_cache.py): what evaluate() hands the judge, what it keeps of
the judge's measurements, when an entry is dropped, and how it survives a corrupt file or a folder it cannot write.
The build and the judge are stand-ins (tests/pipeline/timing_fakes.py); the stand-in here reuses a cached entry the
way the judge does (engine/pipeline/judge/timing.py: a re-timing of eager within 10 %), and which GPU's entry the
judge takes is tested on the judge's own code (TimingJudge._known). tests/cli/test_gpu_eval_cache.py runs it all
on a GPU."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from engine.candidates import load_candidate
from engine.harness.timing import TimingStats
from engine.pipeline import evaluate as ev
from engine.pipeline.baseline_cache import FRESH, USE, BaselineCache, cache_key, config_hashes, describe
from engine.pipeline.protocol.result import CACHED, MEASURED, REUSED, DeviceInfo, JudgeOutcome, JudgeResult
from engine.pipeline.judge.timing import BASELINE_DRIFT, TimingJudge
from engine.config.sections import TimingParams
from engine.pipeline.protocol.types import CandidateSpec, JudgeRequest, SessionBaseline, TimerSpec
from engine.procs import ChildOutcome
from engine.tasks.loader import load_task
from tests.pipeline.timing_fakes import STATS, fake_judge, judge_answer

DEV = {"gpu": "test GPU", "driver": "580.1", "torch": "2.14.1", "cuda": "13.0", "uuid": "GPU-1234"}
TASK = "gelu_bias"


class Judge:
    """A judge stand-in: eager takes `eager_ms` now; a cached entry of this GPU is reused when the re-timing agrees
    within BASELINE_DRIFT, else the config's baselines are measured again and the drift is reported."""

    def __init__(self, eager_ms: float = 0.2, device: dict | None = None, **extra):
        self.eager_ms, self.device, self.extra = eager_ms, dict(device or DEV), extra
        self.requests: list[JudgeRequest] = []

    def __call__(self, request: JudgeRequest, opts) -> JudgeOutcome:
        self.requests.append(request)
        answer = {**judge_answer(request.to_json()), "device": self.device, "baseline_drift": {}}
        mine = (request.cached_baselines or {}).get(DeviceInfo(**self.device).key(), {})
        for name, row in answer["timing"].items():
            row["eager"] = {**STATS, "median_ms": self.eager_ms}
            if (kept := mine.get(name)) is not None:
                then = kept.eager.median_ms
                recheck = {"baseline": "eager", "now_ms": self.eager_ms, "session_ms": then}
                if abs(self.eager_ms / then - 1) <= BASELINE_DRIFT:
                    row["baselines"] = {"source": CACHED, "recheck": recheck, "measured_at": kept.measured_at}
                    row["eager"] = {**STATS, "median_ms": then}
                else:
                    answer["baseline_drift"][name] = recheck
            row["speedup_eager"] = row["eager"]["median_ms"] / STATS["median_ms"]
        answer.update(self.extra)
        return JudgeOutcome.of(ChildOutcome(answer, 0, False, 1.0, ""))


@pytest.fixture
def evaluate(monkeypatch, tmp_path):
    """evaluate(judge, **options) on gelu_bias's forward baseline with the disk cache under tmp_path/cache."""
    fake_judge(monkeypatch, tmp_path)
    task = load_task(TASK)
    cand = load_candidate(task.baseline_dir("forward"))

    def run(judge: Judge, **kw):
        monkeypatch.setattr(ev, "_run_judge", judge)
        opts = ev.EvalOptions(cache_root=tmp_path / "cache", profile=False, **{"baseline_cache": USE, **kw})
        return ev.evaluate(task, cand, "forward", opts)
    return run


def _file(tmp_path: Path) -> Path:
    (path,) = (tmp_path / "cache" / "baselines").glob("*.json")
    return path


def test_the_first_eval_measures_and_keeps_the_second_reuses_with_its_age_and_drift_figure(evaluate, tmp_path):
    first = evaluate(Judge(0.2))
    assert first.passed and first.baselines["cache"] == "miss" and first.baselines["kept"] == ["bench"]
    assert first.phases["baselines.cached"] == 0 and "baselines.cache_read" in first.phases
    assert first.phases["build.cache_hit"] == 1.0
    stored = json.loads(_file(tmp_path).read_text())
    (entry,) = stored["devices"].values()
    assert entry["device"]["gpu"] == "test GPU" and entry["configs"]["bench"]["eager"]["median_ms"] == 0.2

    judge = Judge(0.205)
    second = evaluate(judge)
    (sent,) = judge.requests
    assert set(sent.cached_baselines) == {DeviceInfo(**DEV).key()}
    assert second.baselines["cache"] == "hit" and second.phases["baselines.cached"] == 1.0
    bench = second.baselines["configs"]["bench"]
    assert bench["source"] == "cache" and 0 <= bench["age_s"] < 60
    assert bench["recheck"] == {"baseline": "eager", "now_ms": 0.205, "cached_ms": 0.2, "change": 0.025}
    assert [r.baselines for r in second.rows if r.timed] == ["cache"]
    assert second.to_json()["baselines"]["cache"] == "hit"
    assert describe(second.baselines)[0].startswith("baselines: from the cache, measured ")
    assert "bench +2.5% (within 10%)" in describe(second.baselines)[0]


def test_a_drifted_entry_is_dropped_measured_again_and_replaced(evaluate, tmp_path):
    evaluate(Judge(0.2))
    drifted = evaluate(Judge(0.3))                  # +50 %: more than BASELINE_DRIFT
    assert drifted.baselines["cache"] == "drift" and drifted.passed
    assert drifted.baselines["configs"]["bench"]["drift"]["change"] == pytest.approx(0.5)
    assert [r.baselines for r in drifted.rows if r.timed] == ["measured"]
    assert "moved by more than 10% on bench (eager 0.2 ms cached, 0.3 ms now): dropped and measured again" \
        in describe(drifted.baselines)[0]
    (entry,) = json.loads(_file(tmp_path).read_text())["devices"].values()
    assert entry["configs"]["bench"]["eager"]["median_ms"] == 0.3     # the new figure is what is kept
    assert evaluate(Judge(0.31)).baselines["cache"] == "hit"


def test_fresh_baselines_send_nothing_and_replace_the_entry(evaluate, tmp_path):
    evaluate(Judge(0.2))
    judge = Judge(0.25)
    fresh = evaluate(judge, baseline_cache=FRESH)
    assert judge.requests[0].cached_baselines is None
    assert fresh.baselines["cache"] == "fresh" and fresh.baselines["kept"] == ["bench"]
    (entry,) = json.loads(_file(tmp_path).read_text())["devices"].values()
    assert entry["configs"]["bench"]["eager"]["median_ms"] == 0.25


def test_the_cache_is_off_unless_asked_for(evaluate, tmp_path):
    judge = Judge(0.2)
    report = evaluate(judge, baseline_cache="off")
    assert judge.requests[0].cached_baselines is None and report.baselines == {}
    assert not (tmp_path / "cache" / "baselines").exists()


@pytest.mark.parametrize("taint", [
    {"error": "CUDA error while timing bench"},
    {"integrity": {"bench@timing": {"ok": False, "hack": "timer-forgery"}}},
    {"gpu_shared": "pid 4242 at up to 97 % SM"},
])
def test_an_evaluation_that_is_not_clean_keeps_nothing(evaluate, tmp_path, taint):
    report = evaluate(Judge(0.2, **taint))
    assert report.baselines["kept"] == [] and not (tmp_path / "cache" / "baselines").exists()


def test_another_gpu_or_driver_files_its_own_entry(evaluate, tmp_path):
    evaluate(Judge(0.2))
    other = {**DEV, "driver": "590.2"}
    assert evaluate(Judge(0.5, device=other)).baselines["cache"] == "miss"   # the stand-in sees no entry of its own
    devices = json.loads(_file(tmp_path).read_text())["devices"]
    assert set(devices) == {DeviceInfo(**DEV).key(), DeviceInfo(**other).key()}
    assert evaluate(Judge(0.2)).baselines["cache"] == "hit"


@pytest.mark.parametrize("garbage", [b"{not json", b"\xff\xfe", b'{"schema": 99}', b'[1, 2]',
                                     b'{"schema": 1, "key": {}, "devices": {}}'])
def test_a_corrupt_file_is_ignored_with_a_note_and_replaced(evaluate, tmp_path, garbage):
    evaluate(Judge(0.2))
    _file(tmp_path).write_bytes(garbage)
    judge = Judge(0.2)
    report = evaluate(judge)
    assert judge.requests[0].cached_baselines is None
    assert report.baselines["cache"] == "miss" and report.passed
    assert any("were ignored" in n for n in report.baselines["notes"]), report.baselines
    assert evaluate(Judge(0.2)).baselines["cache"] == "hit"          # the next write replaced it


def test_a_malformed_entry_is_ignored_and_the_rest_of_the_file_still_serves(evaluate, tmp_path):
    evaluate(Judge(0.2))
    path = _file(tmp_path)
    data = json.loads(path.read_text())
    (entry,) = data["devices"].values()
    entry["configs"]["bench"]["eager"] = {"median_ms": "fast"}
    path.write_text(json.dumps(data))
    report = evaluate(Judge(0.2))
    assert report.baselines["cache"] == "miss" and any("ignored" in n for n in report.baselines["notes"])


def test_a_cache_that_cannot_be_read_or_written_never_fails_the_evaluation(monkeypatch, tmp_path):
    fake_judge(monkeypatch, tmp_path)
    monkeypatch.setattr(ev, "_run_judge", Judge(0.2))
    task = load_task(TASK)
    blocked = tmp_path / "a-file"
    blocked.write_text("")                             # the cache root under a file: nothing can be made there
    opts = ev.EvalOptions(cache_root=blocked / "cache", baseline_cache=USE, profile=False)
    report = ev.evaluate(task, load_candidate(task.baseline_dir("forward")), "forward", opts)
    assert report.passed and report.baselines["kept"] == []
    assert any("could not be kept" in n for n in report.baselines["notes"]), report.baselines
    assert any(line.startswith("note: the baselines could not be kept") for line in describe(report.baselines))
    unreadable = tmp_path / "cache2"
    req = _request(task)
    cache = BaselineCache.for_request(unreadable, req)
    cache.path.mkdir(parents=True)                     # a folder where the file should be: reading it fails
    assert cache.read() is None and "IsADirectoryError" in cache.notes[0]


def test_a_read_only_cache_folder_is_left_as_it_was(monkeypatch, tmp_path):
    task = load_task(TASK)
    cache = BaselineCache.for_request(tmp_path, _request(task))

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(os, "replace", refuse)         # as a read-only folder answers (root passes chmod 0500)
    result = Judge(0.2)(_request(task), None).result
    summary = cache.keep(result)
    assert summary["kept"] == [] and "Permission denied" in summary["notes"][-1]
    assert not cache.path.exists() and not list(cache.path.parent.glob(".tmp-*"))


# -- the key -----------------------------------------------------------------------------------------------------

def _request(of_task, **kw) -> JudgeRequest:
    base = dict(task=of_task.to_json(), direction="forward", candidate=CandidateSpec("native", "kb_x", so_path="x.so"),
                timer=TimerSpec("t.so", "kb_timer_1"), result_path="", baselines=("eager", "compile"),
                timing_params=TimingParams())
    return JudgeRequest(**{**base, **kw})


def test_the_key_changes_with_every_field_that_shapes_a_baseline(layernorm_task):
    task = layernorm_task
    base = cache_key(_request(task))
    assert cache_key(_request(task)) == base
    others = [
        _request(task, direction="backward"),
        _request(task, baselines=("eager",)),
        _request(task, timing_params=TimingParams(budget_s=0.2)),
        _request(task, timing_params=TimingParams(flush_l2=False)),
        _request(task, timer=TimerSpec("t.so", "kb_timer_2")),         # another timing helper (source or toolchain)
        _request(task, task={**task.to_json(), "dtype": "bfloat16"}),
    ]
    keys = [cache_key(r) for r in others]
    assert all(k != base for k in keys) and len({json.dumps(k, sort_keys=True) for k in keys}) == len(keys)
    ref = task.spec("forward").reference_path
    ref.write_text(ref.read_text() + "\n# the reference changed\n")     # same path, other content
    assert cache_key(_request(task)) != base
    # the GPU (name, uuid, driver, torch, CUDA) is the judge's part of the key: each one files another entry
    keys = {DeviceInfo(**{**DEV, field: "other"}).key() for field in DEV}
    assert len(keys | {DeviceInfo(**DEV).key()}) == len(DEV) + 1


def test_configs_are_keyed_by_what_shapes_them_not_by_their_tags(layernorm_task):
    task = layernorm_task
    req = _request(task)
    hashes = config_hashes(req)
    configs = [dict(c) for c in req.task["configs"]]
    configs[0] = {**configs[0], "tags": ["timed"], "cost": {}}
    assert config_hashes(_request(task, task={**req.task, "configs": configs}))[configs[0]["name"]] == \
        hashes[configs[0]["name"]]
    for change in ({"seed": 99}, {"init": "uniform"}, {"input_kwargs": {**configs[0]["input_kwargs"], "x": 1}}):
        changed = [{**configs[0], **change}, *configs[1:]]
        assert config_hashes(_request(task, task={**req.task, "configs": changed}))[configs[0]["name"]] != \
            hashes[configs[0]["name"]]
    # the file's key leaves the configs out: a config added or changed does not drop the others' entries
    assert cache_key(_request(task, task={**req.task, "configs": configs[:1]})) == cache_key(req)


def test_an_entry_whose_config_changed_is_not_sent(evaluate, tmp_path):
    evaluate(Judge(0.2))
    path = _file(tmp_path)
    data = json.loads(path.read_text())
    (entry,) = data["devices"].values()
    entry["configs"]["bench"]["config"] = "0" * 64
    path.write_text(json.dumps(data))
    judge = Judge(0.2)
    assert evaluate(judge).baselines["cache"] == "miss" and judge.requests[0].cached_baselines is None


# -- the judge's side: only its own GPU's entries ---------------------------------------------------------------

def _baseline(ms: float) -> SessionBaseline:
    return SessionBaseline(eager=TimingStats(ms, ms / 100, ms, ms, 100, ms), compile_error="no inductor",
                           measured_at=1.7e9)


@pytest.mark.parametrize("field", sorted(DEV), ids=lambda f: f"other-{f}")   # an id "gpu" would mark it `gpu`
def test_the_judge_takes_the_entry_of_its_own_gpu_only(field):
    task = load_task(TASK)
    req = _request(task, cached_baselines={DeviceInfo(**DEV).key(): {"bench": _baseline(0.2)}})
    mine = TimingJudge(req, None, JudgeResult(device=DeviceInfo(**DEV)))
    assert mine._known("bench") == (_baseline(0.2), CACHED)
    assert mine._known("odd-small") == (None, MEASURED)
    other = TimingJudge(req, None, JudgeResult(device=DeviceInfo(**{**DEV, field: "other"})))
    assert other._known("bench") == (None, MEASURED)
    session = TimingJudge(replace(req, session_baselines={"bench": _baseline(0.3)}), None,
                          JudgeResult(device=DeviceInfo(**DEV)))
    assert session._known("bench") == (_baseline(0.3), REUSED)        # the session's, measured later, come first


def test_the_runners_jail_can_neither_write_nor_read_the_cache(monkeypatch, tmp_path):
    from engine.jail.profiles import compiler_spec, runner_spec
    from engine.pipeline.judge.runner_process import make_run_dir
    from engine.pipeline.eval_types import default_cache_root

    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path / "cache"))
    root = default_cache_root().resolve()
    run = make_run_dir()
    try:
        for spec in (run.spec(), runner_spec(run.scratch, [run.ro]), compiler_spec(run.scratch, [run.ro])):
            granted = [Path(p).resolve() for p in (*spec.write, *spec.read, *spec.read_exec)]
            assert not [p for p in granted if p == root or root in p.parents or p in root.parents], granted
            assert [Path(p).resolve() for p in spec.write] == [run.scratch.resolve()]
    finally:
        import shutil
        shutil.rmtree(run.root, ignore_errors=True)
