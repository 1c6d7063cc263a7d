"""The judge's float64 second opinion (engine/pipeline/judge/exact.py), on the CPU through the judge's own analysis
and the stand-in helper (tests/doubles/timing_helper.py): a call that misses the task-dtype reference only because
that reference's own rounding is past the tolerance passes, and says so; a wrong call still fails, and costs the
judge at most TRIES float64 references per config.

The fixture task (tests/fixtures/cancelling_shift) computes (x + 1e4) - 1e4: in float32 that rounds x to about 5e-4,
far past its tolerance of 1e-5, while in float64 it is x. The same through the installed `kbench eval` on a GPU:
tests/pipeline/test_gpu_exact.py."""

from __future__ import annotations

import pytest
import torch

from engine.harness.runtimes import runtime_for
from engine.pipeline.judge import exact
from engine.pipeline.judge.digest import FLOAT64_NOTE
from engine.pipeline.judge.fresh import FreshReferences, emulated
from engine.tasks.loader import load_task
from tests.doubles.timing_helper import Session
from tests.paths import FIXTURES


@pytest.fixture(scope="module")
def task():
    return load_task(FIXTURES / "cancelling_shift")


def _session(task, fn, name="odd"):
    return Session(runtime_for(task, "forward"), next(c for c in task.configs if c.name == name), fn)


def _remake(s, call):
    f = s.prep.fresh
    return lambda ts: s.refs.rebuild(ts, call.seed, f.modes, f.alphas)


def _counted(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = exact.reference64

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(exact, "reference64", counting)
    return calls


def test_the_exact_value_passes_where_only_the_float32_reference_rounds_and_the_verdict_says_so(task, monkeypatch):
    asked = _counted(monkeypatch)
    s = _session(task, lambda x, shift: x.clone())
    first = s.tolerance.compare((s.live[0].clone(),), s.refs.for_call(s.check_job().calls[0]))
    assert not first.ok    # the float32 reference misses the exact value by its own rounding
    corr, integ = s.judge_check(s.check_job())
    assert corr.ok and integ.ok, (corr, integ)
    assert FLOAT64_NOTE in corr.reason and corr.reason.startswith("4 of 4 calls")
    assert len(asked) >= 4     # one float64 reference per call it rescued


def test_the_upstream_modes_request_takes_no_second_opinion(task, monkeypatch):
    """`float64_opinion` false (the upstream mode: its benchmarks compare with the float32 reference only): the exact
    kernel fails as upstream's allclose would fail it, and no float64 reference is computed."""
    asked = _counted(monkeypatch)
    s = _session(task, lambda x, shift: x.clone())
    s.refs = FreshReferences(s.runtime, s.prep, emulated, float64=False)
    corr, _ = s.judge_check(s.check_job())
    assert not corr.ok and "outside" in corr.reason and not asked


def test_a_kernel_that_rounds_as_the_reference_does_needs_no_second_opinion(task, monkeypatch):
    asked = _counted(monkeypatch)
    s = _session(task, lambda x, shift: (x + shift) - shift)
    corr, integ = s.judge_check(s.check_job())
    assert corr.ok and integ.ok and corr.reason == "" and not asked


@pytest.mark.parametrize("wrong", [lambda x, shift: x + 1e-3, lambda x, shift: x * 1.001])
def test_a_wrong_kernel_fails_against_both_and_costs_at_most_tries_float64_references(task, monkeypatch, wrong):
    asked = _counted(monkeypatch)
    s = _session(task, wrong)
    corr, _ = s.judge_check(s.check_job())
    assert not corr.ok and "outside" in corr.reason and FLOAT64_NOTE not in corr.reason
    assert 1 <= len(asked) <= exact.TRIES


def test_the_references_own_float32_casts_are_what_rescue_the_exact_kernel(task, monkeypatch):
    """The fixture's reference takes its sum on `x.float()` (as robust-kbench's llama_rmsnorm takes its rms): followed
    into float32, that cast rounds the second opinion as much as the first, and the exact kernel fails both."""
    import contextlib
    monkeypatch.setattr(exact, "keeping_float64", contextlib.nullcontext)
    s = _session(task, lambda x, shift: x.clone())
    corr, _ = s.judge_check(s.check_job())
    assert not corr.ok and "outside" in corr.reason


def test_float32_casts_of_float64_tensors_stay_float64_and_nothing_else_changes():
    x, y = torch.randn(3, dtype=torch.float64), torch.randn(3)
    with exact.keeping_float64():
        kept = [x.float(), x.to(torch.float32), x.to("cpu", torch.float32), x.to(dtype=torch.float32),
                x.type(torch.float32), x.type("torch.FloatTensor")]
        others = [(y.double(), torch.float64), (y.float(), torch.float32), (x.to(torch.float16), torch.float16),
                  (x.to(torch.int32), torch.int32), (y.to(torch.float32), torch.float32)]
    assert all(t.dtype == torch.float64 and torch.equal(t, x) for t in kept)
    assert all(t.dtype == want for t, want in others)
    assert x.float().dtype == torch.float32    # outside the mode, a cast is a cast


def test_a_reference_that_cannot_stay_in_float64_gives_no_second_opinion(task, monkeypatch):
    """A reference that fixes its dtype (here: the model's forward writes into a float32 buffer it makes) returns no
    float64 outputs: the judge takes no opinion from it and the first comparison stands."""
    s = _session(task, lambda x, shift: x.clone())
    real = s.runtime.ref.forward_fn
    monkeypatch.setattr(s.runtime.ref, "forward_fn",
                        lambda x, shift: torch.empty(x.shape, dtype=torch.float32).copy_(real(x, shift)))
    call = s.check_job().calls[0]
    assert exact.reference64(s.runtime, s.prep, call.variant, _remake(s, call)) is None


def test_the_float64_reference_leaves_the_runtime_as_it_found_it(task):
    """Its widened copies are the float64 run's alone: afterwards the runtime holds the variant's own objects."""
    s = _session(task, lambda x, shift: x.clone())
    call = s.check_job().calls[1]
    ref64 = exact.reference64(s.runtime, s.prep, call.variant, _remake(s, call))
    assert ref64 is not None and ref64[0].dtype == torch.float64
    state = s.prep.variants[call.variant].state
    assert all(s.runtime.__dict__[k] is v for k, v in state.items())
    assert all(t.dtype == torch.float32 for t in s.runtime.inputs())


def test_the_correctness_verdict_names_the_configs_only_the_float64_reference_took():
    from engine.pipeline.eval_types import ConfigRow, EvalReport
    from engine.pipeline.verdicts import _passed_with_notes
    note = f"2 of 4 calls {FLOAT64_NOTE} (whose own rounding is past the tolerance)"
    report = EvalReport("t", "forward", "h", "native", [], [ConfigRow("plain", True), ConfigRow("odd", True, note),
                                                          ConfigRow("wide", True, note)], {}, {})
    assert _passed_with_notes(report) == f"; odd: {note} (and 1 more configs)"
    report.rows = [ConfigRow("plain", True)]
    assert _passed_with_notes(report) == ""


@pytest.mark.parametrize("source, direction, config", [
    ("llama_rmsnorm", "backward", "odd-small"),                                  # native, autograd through forward_fn
    (FIXTURES / "robust_kbench" / "linear", "backward", None),                   # robust-kbench's AutogradFunction
    (FIXTURES / "robust_kbench" / "linear", "forward", None),
    (FIXTURES / "kernelbench" / "matmul_relu.py", "forward", None),              # a KernelBench Model's own weights
], ids=["native-backward", "rkb-backward", "rkb-forward", "kernelbench"])
def test_every_runtime_gives_its_reference_in_float64(source, direction, config):
    """The widening reaches what each runtime computes with (model, inputs, grad_out, the call's fresh values): the
    float64 reference has every floating output in float64 and agrees with the float32 one to float32 rounding."""
    t = load_task(source)
    rt = runtime_for(t, direction)
    cfg = next(c for c in t.configs if c.name == config) if config else min(
        t.configs, key=lambda c: sum(v for v in {**c.model_kwargs, **c.input_kwargs}.values()
                                     if isinstance(v, int) and not isinstance(v, bool)))
    s = Session(rt, cfg, lambda *a: None)
    for call in s.check_job().calls[:2]:
        f = s.prep.fresh
        remake = (lambda ts, c=call: s.refs.rebuild(ts, c.seed, f.modes, f.alphas)) if f and f.active else None
        ref64 = exact.reference64(s.runtime, s.prep, call.variant, remake)
        ref32 = s.refs.for_call(call)
        assert ref64 is not None and len(ref64) == len(ref32), (source, direction)
        for a, b in zip(ref64, ref32):
            if isinstance(b, torch.Tensor) and b.is_floating_point():
                assert a.dtype == torch.float64 and a.shape == b.shape
                scale = float(b.abs().max()) or 1.0
                assert float((a - b.double()).abs().max()) <= 1e-4 * scale, (source, direction)
