"""The judge holds one config, and one call's outputs, at a time (issue: the reference passes its own judge; seen on an
H200: the judge alone held 25-37 GiB on KernelBench level 1 problems 23, 24 and 36).

- A check job's outputs are compared as each call's records come in, then freed (engine/pipeline/judge/digest.py); the
  verdicts are the ones the whole job would have given.
- A timing job's checked outputs wait in host memory until the job has ended, then come to the judge's GPU one call
  at a time, each checked against its signature, compared and freed before the next (a timing job checks four
  calls: all of a 1 GiB softmax's at once took the judge to 3.6x the problem's footprint).
- A config too large to keep from its check to its timing is freed after its check and prepared again for its
  timing; the baselines then set its first variant up without a reference.
The same runs on a GPU through the real runner in tests/pipeline/test_gpu_memory.py (peak memory per config)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from engine.harness.runtimes import runtime_for
from engine.pipeline.judge import analysis
from engine.pipeline.judge import evaluation as judge_eval
from engine.pipeline.judge import timing_phase as judge_timing_phase
from engine.pipeline.protocol import wire
from engine.pipeline.judge.digest import digest_call
from engine.pipeline.judge.main import ResultFile
from engine.pipeline.judge.runner_link import Held, settle
from engine.pipeline.judge.timer import collect
from engine.config.sections import TimingParams
from engine.pipeline.protocol.types import TimerSpec
from engine.tasks.loader import load_task
from tests.doubles.timing_helper import Session


def _ln(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def _records(job: analysis.Job, job_id: int = 1) -> tuple[list[wire.Record], dict[int, object]]:
    """The signed records a helper would have written for `job` (signatures aside), and the output behind each."""
    recs, payloads, seq = [wire.Record(wire.JOB_BEGIN, 0, job_id, {}, 0.0)], {}, 1
    for c in job.calls:
        outs = c.outputs or []
        recs.append(wire.Record(wire.ITER, seq, job_id, {"i": c.index, "phase": c.phase, "v": c.variant, "ms": c.ms,
                                                          "ms_all": c.ms_all, "checked": int(c.checked),
                                                          "outputs": len(outs), "seed": f"{c.seed:016x}"}, 0.0))
        seq += 1
        for k, o in enumerate(outs):
            recs.append(wire.Record(wire.OUTPUT, seq, job_id, {"i": c.index, "k": k, "kind": "tensor"}, 0.0))
            payloads[seq] = o
            seq += 1
    recs.append(wire.Record(wire.JOB_END, seq, job_id, dict(job.end), 0.0))
    return recs, payloads


@pytest.mark.parametrize("behaviour", ["honest", "pointer-cache", "constant"])
def test_a_check_job_is_digested_call_by_call_with_the_verdicts_of_the_whole_job(layernorm, behaviour):
    cache: dict = {}
    fn = {"honest": _ln,
          "pointer-cache": lambda x, w, b, eps: cache.setdefault(x.data_ptr(), _ln(x, w, b, eps)).clone(),
          "constant": lambda x, w, b, eps: torch.full_like(x, 0.5)}[behaviour]
    cfg = next(c for c in layernorm.configs if c.name == "odd-small")
    s = Session(runtime_for(layernorm, "forward"), cfg, fn)
    whole = s.check_job()
    recs, payloads = _records(whole)
    whole_verdict = s.judge_check(whole)
    seen: list[analysis.Call] = []

    def on_checked(call):
        assert all(c.outputs is None for c in seen), "an earlier call's outputs are still held"
        previous = s.refs.for_call(seen[-1]) if seen else None
        digest_call(call, s.refs.for_call(call), previous, s.compose, s.tolerance)
        seen.append(call)
    it = iter(recs)
    streamed = collect(lambda deadline: next(it), 1, 0.0, lambda rec, k: payloads[rec.seq], on_checked)
    assert len(seen) == len(whole.calls) and all(c.outputs is None and c.digest for c in streamed.calls)
    assert s.judge_check(streamed) == whole_verdict
    if behaviour != "honest":
        assert not whole_verdict[1].ok


def test_a_digest_that_fails_as_records_come_is_raised_where_the_call_is_judged(layernorm):
    cfg = next(c for c in layernorm.configs if c.name == "odd-small")
    s = Session(runtime_for(layernorm, "forward"), cfg, _ln)
    job = s.check_job()
    job.calls[1].outputs, job.calls[1].deferred = None, torch.OutOfMemoryError("CUDA out of memory")
    with pytest.raises(torch.OutOfMemoryError):     # judge_eval.compared passes the judge's own lack on
        s.judge_check(job)


def test_held_timing_outputs_are_settled_after_the_job_and_a_changed_one_voids_the_stream():
    t = torch.arange(4.0)
    job = analysis.Job(calls=[analysis.Call(0, "t", 0, 1.0, 1.0, True, outputs=[Held(lambda: t)]),
                              analysis.Call(1, "t", 0, 1.0, 1.0, False)])
    settle(job)
    assert job.calls[0].outputs == [t] and not job.forged

    def changed():
        raise wire.Forgery("the bytes of output 0 of iteration 0 do not match their signed fingerprint")
    job = analysis.Job(calls=[analysis.Call(0, "t", 0, 1.0, 1.0, True, outputs=[Held(changed)])])
    settle(job)
    assert "do not match their signed fingerprint" in job.forged


def _timing_job(n: int, forged_at: int | None = None) -> tuple[analysis.Job, list[int], list[int]]:
    """A timing job of `n` checked calls whose held outputs note how many are on the judge's GPU at once."""
    on_gpu: list[int] = []
    most: list[int] = []

    def held(i: int) -> Held:
        def finish():
            if i == forged_at:
                raise wire.Forgery(f"the bytes of output 0 of iteration {i} do not match their signed fingerprint")
            on_gpu.append(i)
            most.append(len(on_gpu))
            return torch.full((4,), float(i))
        return Held(finish)
    calls = [analysis.Call(i, "t", 0, 1.0, 1.0, True, outputs=[held(i)]) for i in range(n)]
    return analysis.Job(calls=calls + [analysis.Call(n, "t", 0, 1.0, 1.0, False)]), on_gpu, most


def _digesting_judge(on_gpu: list[int], monkeypatch) -> judge_eval.Judge:
    judge = judge_eval.Judge(TimerSpec("t.so", "t"))

    def digester(refs, compose, tol, chained=False):
        def digest(call):
            assert call.outputs is not None and float(call.outputs[0][0]) == call.index
            on_gpu.remove(call.index)   # compared, then freed (engine/pipeline/judge/digest.py)
            call.digest, call.outputs = "compared", None
        return digest
    judge._digester, judge._references = digester, lambda runtime, prep: None
    monkeypatch.setattr(judge_timing_phase, "composer", lambda runtime, prep: None)
    return judge


def test_a_timing_jobs_checked_outputs_come_to_the_judges_gpu_one_call_at_a_time(monkeypatch):
    job, on_gpu, most = _timing_job(4)
    _digesting_judge(on_gpu, monkeypatch)._digest_timed(job, None, None, None)
    assert max(most) == 1 and on_gpu == []
    assert [c.digest for c in job.timed()] == ["compared"] * 4 + [None] and not job.forged


def test_a_forged_checked_output_voids_the_timing_job_and_nothing_after_it_is_brought_over(monkeypatch):
    job, on_gpu, most = _timing_job(4, forged_at=2)
    _digesting_judge(on_gpu, monkeypatch)._digest_timed(job, None, None, None)
    assert "iteration 2 do not match their signed fingerprint" in job.forged
    assert [c.digest for c in job.timed()] == ["compared", "compared", None, None, None]
    assert isinstance(job.calls[3].outputs[0], Held)   # never settled


def _prep(label: str) -> SimpleNamespace:
    """A stand-in for a config's preparation, named by `label`."""
    return SimpleNamespace(label=label, variants=[SimpleNamespace(plan=SimpleNamespace(call_seed=None))], fresh=None,
                           mutated=())


def _judge(tmp_path, events, held):
    """A Judge whose runner, preparation and baselines only note what happens, in order."""
    judge = judge_eval.Judge(TimerSpec("t.so", "t"))
    judge.req = SimpleNamespace(timing=True, timing_configs=[], timing_params=TimingParams(), trials=2,
                                integrity=True, baselines=("eager",))
    judge.out, judge.local = ResultFile(tmp_path / "result.json"), object()
    judge.held = dict(held)
    judge.runner = SimpleNamespace(
        process=None, drop=lambda name, deadline: events.append(f"drop {name}"),
        run_job=lambda job, decode, *a: (events.append(f"{job.mode} {job.cid}"),
                                                (analysis.Job(end={"n": 0, "checked": []}), None))[1],
        close=lambda: events.append("close"))
    judge._gpu_bytes = lambda: 8 << 30                       # KEEP_FOR_TIMING of it: 1 GiB
    judge._note_memory = judge._digest_timed = lambda *a: None
    return judge


def test_a_config_too_large_to_keep_is_freed_after_its_check_and_prepared_again_for_its_timing(tmp_path, monkeypatch):
    events: list[str] = []
    small, big = SimpleNamespace(name="small"), SimpleNamespace(name="big")
    judge = _judge(tmp_path, events, {})

    def check(cfg, runtime, tol):
        judge.held[cfg.name] = (100 << 20) if cfg is small else (3 << 30)
        events.append(f"check {cfg.name}")
        return _prep(f"prep {cfg.name}"), True
    judge._check = check
    to_time = judge._check_all([small, big], None, None)
    assert to_time == {"small": _prep("prep small"), "big": None}
    assert events == ["check small", "check big", "drop big"] and set(judge.held) == {"small"}

    events.clear()

    def prepare_again(cfg, runtime):
        judge.held[cfg.name] = 3 << 30
        events.append(f"prepare {cfg.name}")
        return _prep(f"prep {cfg.name} again"), None
    judge._prepare = prepare_again
    monkeypatch.setattr(judge_timing_phase, "prepare_baseline",
                        lambda rt, cfg, device, call_seed, seed=None: f"baseline {cfg.name}")
    monkeypatch.setattr(judge_timing_phase, "reference_outputs", lambda prep: [])
    for name in ("reset_peak_memory_stats", "empty_cache"):
        monkeypatch.setattr(torch.cuda, name, lambda: None)

    class Timing:
        def __init__(self, *a):
            pass

        def verdict(self, runtime, prep, tol, job, hasher=None, fresh=None, mutated=()):
            events.append(f"baselines on {prep}")
            return judge_timing_phase.TimingRow()
    monkeypatch.setattr(judge_timing_phase, "TimingJudge", Timing)
    with contextlib.suppress(judge_eval.Stop):
        judge._time([small, big], to_time, None, None)
    assert events == ["time small", "prepare big", "time big", "drop big", "close",
                      "baselines on baseline small", "baselines on baseline big"]


def test_on_a_large_gpu_the_configs_kept_for_timing_stay_under_a_gibibyte(tmp_path):
    """KEEP_MAX_BYTES: on an 80 GiB GPU (a 10 GiB share) three 600 MiB configs are not all kept; the runner of a
    large problem holds one config at a time, whatever the GPU."""
    events: list[str] = []
    judge = _judge(tmp_path, events, {})
    judge._gpu_bytes = lambda: 80 << 30
    cfgs = [SimpleNamespace(name=n) for n in ("a", "b", "c")]

    def check(cfg, runtime, tol):
        judge.held[cfg.name] = 600 << 20
        return _prep(f"prep {cfg.name}"), True
    judge._check = check
    to_time = judge._check_all(cfgs, None, None)
    assert to_time == {"a": _prep("prep a"), "b": None, "c": None}
    assert events == ["drop b", "drop c"] and set(judge.held) == {"a"}
