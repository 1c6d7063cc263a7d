"""The pipelined executor: compile overlaps GPU work; compile failures never reach a GPU worker."""

from __future__ import annotations

import functools
import threading
import time

import pytest

from engine.candidates import Candidate
from tests.doubles.evaluator import fake_build, fake_gpu, fake_speedup
from engine.evolve.local_executor import LocalPipelineExecutor
from engine.evolve.outcome import EvalOutcome
from engine.evolve.worker_fns import visible_gpus
from engine.pipeline.eval_types import EvalOptions
from engine.tasks.model import default_timing_configs
from engine.verdict import Status


def cands(n, fail=()):
    return [Candidate("native", {"kernel.cu": f"// k{i}\n" + ("// FAIL_COMPILE\n" if i in fail else ""),
                                 "binding.cpp": "// b\n"}, f"c{i}") for i in range(n)]


def overlap(a, b):
    return sum(max(0.0, min(x1, y1) - max(x0, y0)) for x0, x1 in a for y0, y1 in b)


class Recorder:
    def __init__(self, build_s, gpu_s):
        self.build_s, self.gpu_s = build_s, gpu_s
        self.builds, self.gpus, self.lock = [], [], threading.Lock()

    def build(self, cj, cache_root, timeout_s=0.0):
        t0 = time.monotonic()
        r = fake_build(cj, cache_root, sleep_s=self.build_s)
        with self.lock:
            self.builds.append((t0, time.monotonic()))
        return r

    def gpu(self, task, cand, direction, opts):
        t0 = time.monotonic()
        r = fake_gpu(task, cand, direction, opts, sleep_s=self.gpu_s)
        with self.lock:
            self.gpus.append((t0, time.monotonic(), cand.name, opts.gpu))
        return r


def run_all(ex, cs):
    futs = [ex.submit(c) for c in cs]
    return [f.result(timeout=30) for f in futs]


def test_pipelined_compile_overlaps_gpu(task, tmp_path):
    rec = Recorder(0.15, 0.15)
    ex = LocalPipelineExecutor(task, "forward", EvalOptions(cache_root=tmp_path), gpus=[0], build_workers=2,
                               build_fn=rec.build, gpu_fn=rec.gpu, processes=False)
    t0 = time.monotonic()
    outs = run_all(ex, cands(8))
    wall = time.monotonic() - t0
    stats = ex.stats()
    ex.close()
    assert all(o.timed and o.failed_stage is None for o in outs)
    assert [o.speedup_eager for o in outs] == [fake_speedup(c) for c in cands(8)]
    gpu_iv = [(a, b) for a, b, _, _ in rec.gpus]
    assert overlap(rec.builds, gpu_iv) > 0.5        # seconds of compile that ran while the GPU measured
    assert wall < 0.8 * (8 * 0.3)                   # strictly sequential would take 2.4 s
    assert stats["gpu_busy_fraction"] > 0.6 and stats["completed"] == 8 and stats["unmeasured"] == 0
    assert stats["candidates_per_hour"] > 0


def test_sequential_mode_has_no_overlap(task, tmp_path):
    rec = Recorder(0.05, 0.05)
    ex = LocalPipelineExecutor(task, "forward", EvalOptions(cache_root=tmp_path), gpus=[0], pipelined=False,
                               build_fn=rec.build, gpu_fn=rec.gpu)
    outs = run_all(ex, cands(4))
    ex.close()
    assert all(o.timed for o in outs)
    assert overlap(rec.builds, [(a, b) for a, b, _, _ in rec.gpus]) == 0.0
    assert ex.stats()["gpu_busy_fraction"] < 0.75


def test_compile_failures_never_reach_a_gpu_and_verdicts_stream(task, tmp_path):
    rec = Recorder(0.0, 0.0)
    ex = LocalPipelineExecutor(task, "forward", EvalOptions(cache_root=tmp_path), gpus=[0, 1], build_workers=2,
                               build_fn=rec.build, gpu_fn=rec.gpu, processes=False)
    stages = []
    cs = cands(6, fail={1, 4})
    futs = [ex.submit(c, on_stage=lambda v, n=c.name: stages.append((n, v.stage, v.status))) for c in cs]
    outs = [f.result(timeout=30) for f in futs]
    ex.close()
    assert sorted(n for _, _, n, _ in rec.gpus) == ["c0", "c2", "c3", "c5"]
    assert {g for *_, g in rec.gpus} <= {0, 1}
    for i in (1, 4):
        assert outs[i].failed_stage == "compile" and [v.stage for v in outs[i].verdicts] == ["compile"]
        assert outs[i].measurement() is None
    ok = outs[0]
    assert [v.stage for v in ok.verdicts] == ["compile", "correctness", "timing"]
    assert ok.verdicts[0].status == Status.PASS and ok.gpu in (0, 1)
    m = ok.measurement()
    # timed as the real evaluation times: the task's `bench` and `timed` configs (engine.tasks.model)
    assert m.speedup_eager == pytest.approx(fake_speedup(cs[0]))
    assert [c.config for c in m.configs] == (default_timing_configs(task) or [c.name for c in task.configs])
    assert ("c1", "compile", Status.FAIL) in stages and ("c0", "timing", Status.PASS) in stages


def test_process_pool_builds_and_cancel(task, tmp_path):
    ex = LocalPipelineExecutor(task, "forward", EvalOptions(cache_root=tmp_path), gpus=[None], build_workers=1,
                               build_fn=functools.partial(fake_build, sleep_s=0.0),
                               gpu_fn=functools.partial(fake_gpu, sleep_s=0.3))
    cs = cands(5)
    futs = [ex.submit(c) for c in cs]
    assert futs[0].result(timeout=60).timed          # built in a spawned worker process
    n = ex.cancel_pending()
    assert n >= 2
    done = [f for f in futs if not f.cancelled()]
    for f in done:
        assert isinstance(f.result(timeout=30), EvalOutcome)
    ex.close()


def test_evaluations_that_found_no_gpu_are_counted_as_unmeasured(task, tmp_path):
    from engine.gpu_wait import NO_GPU

    def no_gpu(task, candidate, direction, opts):
        return EvalOutcome([], infra_error=NO_GPU)
    ex = LocalPipelineExecutor(task, "forward", EvalOptions(cache_root=tmp_path), gpus=[None], build_workers=1,
                               build_fn=Recorder(0.0, 0.0).build, gpu_fn=no_gpu, processes=False)
    outs = run_all(ex, cands(3))
    ex.close()
    assert all(o.no_gpu and o.measurement() is None for o in outs)
    assert ex.stats()["unmeasured"] == 3 and ex.stats()["completed"] == 3


def test_visible_gpus_reads_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_gpus() == [2, 3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []
