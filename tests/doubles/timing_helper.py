"""A test double of the compiled timing helper's call protocol, on CPU tensors, for the judge's analysis.

It does what engine/pipeline/timer/binding.cpp does per call (refill the live inputs with fresh values from a
variant, as engine/pipeline/judge/fresh.py's `emulated` computes them bit for bit, call,
snapshot before "synchronising", alias and mutation probes with the inputs the reference mutates in place left out
of the latter, copy the outputs out and then those inputs) and returns the
`analysis.Job` the judge would have read from the signed records. Only tests use it; on a GPU the real helper
runs (the gpu-marked tests, tests/*/test_gpu_*.py)."""

from __future__ import annotations

import random
import time
from typing import Any, Callable

import torch

from engine.harness.runtimes.base import as_outputs
from engine.pipeline.judge import analysis
from engine.pipeline.protocol import wire
from engine.pipeline.judge.fresh import FreshReferences, choose, emulated
from engine.pipeline.judge.configs import Prepared, plan_message, prepare


def _storages(ts: list[torch.Tensor]) -> list[tuple[int, int]]:
    out = []
    for t in ts:
        if isinstance(t, torch.Tensor) and t.numel():
            p = t.untyped_storage().data_ptr()
            out.append((p, p + t.untyped_storage().nbytes()))
    return out


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    return any(x0 < y1 and y0 < x1 for x0, x1 in a for y0, y1 in b)


class Session:
    """One config of a runtime prepared by the judge's own code, and a candidate function called the way the
    runner calls it (`module.<entry>(*args)`, args built from the live tensors)."""

    def __init__(self, runtime: Any, cfg: Any, fn: Callable[..., Any], trials: int = 2, fresh: bool = True):
        self.runtime = runtime
        self.prep: Prepared = prepare(runtime, cfg, trials, "cpu")
        if fresh:   # each call's inputs as the helper makes them (engine/pipeline/judge/fresh.py, emulated on the CPU)
            self.prep.fresh = choose(runtime, self.prep, self.tolerance, emulated)
        header, _ = plan_message(self.prep)
        self.refs = FreshReferences(runtime, self.prep, emulated)
        self.seeds = random.Random(1234)
        k, n = header.variants, header.per_variant
        self.variants = [self.prep.tensors[v * n:(v + 1) * n] for v in range(k)]
        self.live = [t.clone() for t in self.variants[0]]
        self.args = wire.decode_args(header.args, self.live)
        self.fn = fn
        self.prev: list[torch.Tensor] = []
        self.mutable = tuple(header.mutable_inputs)   # what the helper is told the call may change

    @property
    def tolerance(self) -> analysis.Tolerance:
        spec = self.runtime.spec
        return analysis.Tolerance(spec.tolerance.atol, spec.tolerance.rtol, spec.max_mismatch_fraction)

    def call(self, index: int, phase: str, v: int, checked: bool, settle_s: float = 0.0) -> analysis.Call:
        seed = self.seeds.getrandbits(64)
        fresh = self.prep.fresh
        given = emulated(self.variants[v], seed, fresh.modes, fresh.alphas) if fresh and fresh.active \
            else self.variants[v]
        for live, src in zip(self.live, given):
            live.copy_(src)
        with torch.no_grad():
            outs = list(as_outputs(self.fn(*self.args)))
        tensors = [o for o in outs if isinstance(o, torch.Tensor)]
        snaps = [t.clone() for t in tensors]
        if settle_s:
            time.sleep(settle_s)
        async_diff = int(any(not torch.equal(torch.nan_to_num(a, 1e-7), torch.nan_to_num(b, 1e-7))
                             for a, b in zip(snaps, tensors))) if settle_s else -1
        mutated = next((k for k, (live, src) in enumerate(zip(self.live, given))
                        if k not in self.mutable and not torch.equal(live, src)), -1)
        call = analysis.Call(index, phase, v, 1.0, 1.0, checked, _overlap(_storages(tensors), _storages(self.live)),
                             _overlap(_storages(tensors), _storages(self.prev)), mutated, async_diff,
                             [o.clone() if isinstance(o, torch.Tensor) else o for o in outs] if checked else None,
                             seed=seed, mutable=self.mutable,
                             inputs_after=[self.live[k].clone() for k in self.mutable] if checked else None)
        self.prev = tensors
        return call

    def check_job(self, settle_s: float = 0.02) -> analysis.Job:
        job = analysis.Job()
        k = len(self.variants)
        try:
            for i, v in enumerate(list(range(k)) * 2):
                job.calls.append(self.call(i, "c", v, True, settle_s))
        except Exception as exc:  # noqa: BLE001 - as the helper reports a raising call
            job.error, job.error_where, job.error_index = f"{type(exc).__name__}: {exc}", "call", len(job.calls)
        job.end = {"status": "error" if job.error else "ok", "n": len(job.calls), "checked": []}
        return job

    def time_job(self, n: int, checked: list[int]) -> analysis.Job:
        job = analysis.Job()
        for i in range(n):
            job.calls.append(self.call(i, "t", i % len(self.variants), i in checked))
        job.end = {"status": "ok", "n": n, "checked": sorted(checked)}
        return job

    def judge_check(self, job: analysis.Job) -> tuple[Any, Any]:
        return analysis.judge_check(job, self.refs, self.compose, self.tolerance, [v.seed for v in self.prep.variants])

    def compose(self, v: int, outputs: list[Any]) -> tuple:
        self.runtime.restore_state(self.prep.variants[v].state)
        return self.runtime.compose(self.runtime.inputs(), outputs)
