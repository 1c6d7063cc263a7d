"""The runner's word on a config's GPU memory (msg.JobDone.peak_bytes) is that config's own: its setup, its tensors
and its calls. The configs it keeps prepared meanwhile for their timing (the judge keeps them within its
KEEP_FOR_TIMING share of the GPU, whatever the problem) are reported apart (`kept_bytes`), and so is the poisoning
of its free cached blocks, memory it already holds.

Seen on an H200: a 1 GiB softmax's runner reported 8,312 MiB, 4.06x the problem's footprint, for a config whose own
tensors and calls take 5 GiB: the 3 GiB of another config kept for timing were counted in. The GPU figures are
tests/pipeline/test_gpu_memory.py's; here the runner's arithmetic runs against a stand-in of torch's allocator."""

from __future__ import annotations

import pytest
import torch

from engine.harness import poison
from engine.pipeline.protocol import helper_call
from engine.pipeline.protocol import messages as msg
from engine.pipeline.runner.main import Runner, _Configured
from engine.timing_params import TimingParams

GIB = 1 << 30


class Allocator:
    """torch.cuda's allocation figures, moved by hand."""

    def __init__(self, allocated: int):
        self.now, self.peak = allocated, allocated

    def alloc(self, n: int) -> None:
        self.now += n
        self.peak = max(self.peak, self.now)

    def free(self, n: int) -> None:
        self.now -= n


@pytest.fixture
def allocator(monkeypatch):
    a = Allocator(0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *x: a.now)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *x: a.peak)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *x: setattr(a, "peak", a.now))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *x: None)
    return a


def _configured(held: int, setup_peak: int) -> _Configured:
    return _Configured([], [], lambda: None, [], [], [], held=held, setup_peak=setup_peak)


def _runner(configs: dict[str, _Configured]) -> Runner:
    runner = Runner.__new__(Runner)
    runner.timer, runner.configs = object(), configs
    return runner


def test_a_jobs_peak_is_its_configs_own_and_what_is_kept_for_other_configs_is_reported_apart(allocator, monkeypatch):
    # config a: 3 GiB of variants and live inputs; config b, kept for its timing: 3 GiB more; free cached blocks: 2 GiB
    allocator.now = 6 * GIB
    monkeypatch.setattr(poison, "poison_free_cache", lambda: (allocator.alloc(2 * GIB), allocator.free(2 * GIB)))

    def calls(*args, **kwargs):   # each call's output beside the previous call's
        allocator.alloc(2 * GIB)
        allocator.free(2 * GIB)
        return "ok"
    monkeypatch.setattr(helper_call, "run_helper", calls)
    runner = _runner({"a": _configured(3 * GIB, 3 * GIB), "b": _configured(3 * GIB, 3 * GIB)})
    done = runner.job(msg.Job(job=1, cid="a", mode="time", timing=TimingParams()))
    assert isinstance(done, msg.JobDone)
    assert (done.peak_bytes, done.kept_bytes) == (5 * GIB, 3 * GIB)


def test_a_setup_larger_than_its_calls_is_the_figure(allocator, monkeypatch):
    # a config whose setup briefly held twice its tensors (a strided argument copied over): that peak stands
    allocator.now = 3 * GIB
    monkeypatch.setattr(poison, "poison_free_cache", lambda: None)
    monkeypatch.setattr(helper_call, "run_helper", lambda *a, **k: "ok")
    done = _runner({"a": _configured(3 * GIB, 4 * GIB)}).job(msg.Job(job=1, cid="a", mode="check"))
    assert (done.peak_bytes, done.kept_bytes) == (4 * GIB, 0)
