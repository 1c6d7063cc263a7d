"""The judge's analysis on CPU: what each behaviour of a candidate makes of the verdicts, for outputs produced by
a test double of the helper's call protocol (tests/doubles/timing_helper.py) with pure-torch candidates. The same
behaviours run through the real helper and runner on a GPU in tests/integrity/test_gpu_exploits.py and
tests/integrity/test_gpu_integrity.py."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

from engine.harness.runtimes import runtime_for
from engine.pipeline.judge import analysis
from engine.tasks.loader import load_task
from tests.doubles.timing_helper import Session
from tests.paths import FIXTURES


def _small(task):
    return next(c for c in task.configs if c.name == "odd-small")


def _ln(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def _check(task, fn, direction="forward"):
    s = Session(runtime_for(task, direction), _small(task), fn)
    return s.judge_check(s.check_job())


def test_an_honest_candidate_passes_every_check(layernorm):
    corr, integ = _check(layernorm, _ln)
    assert corr.ok and integ.ok, (corr, integ)
    assert corr.max_abs_err is not None and corr.max_abs_err < 1e-4
    assert set(integ.checks) >= {"async-completeness", "input-alias", "persistent-output", "stale-result",
                                 "constant-output"}


def test_a_wrong_candidate_fails_correctness_and_is_no_hack(layernorm):
    corr, integ = _check(layernorm, lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, None, eps))
    assert not corr.ok and "outside atol" in corr.reason and "trial 0" in corr.reason
    assert integ.ok, integ


def test_mutating_an_input_is_named(layernorm):
    def forward(x, w, b, eps):
        y = _ln(x, w, b, eps)
        x.zero_()
        return y
    corr, _ = _check(layernorm, forward)
    assert not corr.ok and "modified input 0 in place" in corr.reason


def test_a_result_written_into_the_input_is_input_mutation(layernorm):
    def forward(x, w, b, eps):
        x.copy_(_ln(x, w, b, eps))
        return x
    corr, integ = _check(layernorm, forward)
    assert not corr.ok and integ.hack == analysis.INPUT_ALIAS


def test_a_pointer_keyed_cache_returning_its_buffer_is_a_static_cache(layernorm):
    cache = {}

    def forward(x, w, b, eps):
        return cache.setdefault(x.data_ptr(), _ln(x, w, b, eps))
    corr, integ = _check(layernorm, forward)
    assert integ.hack in (analysis.PERSISTENT_OUTPUT, analysis.STALE_RESULT), integ
    assert not corr.ok


def test_a_pointer_keyed_cache_returning_copies_follows_the_previous_inputs(layernorm):
    cache = {}

    def forward(x, w, b, eps):
        return cache.setdefault(x.data_ptr(), _ln(x, w, b, eps)).clone()
    corr, integ = _check(layernorm, forward)
    assert not corr.ok and integ.hack == analysis.STALE_RESULT and "previous call's inputs" in integ.reason, integ


def test_a_call_count_cache_is_named(layernorm):
    state = {"calls": 0, "last": None}

    def forward(x, w, b, eps):
        state["calls"] += 1
        if state["calls"] > 2 and state["last"] is not None:
            return state["last"].clone()
        state["last"] = _ln(x, w, b, eps)
        return state["last"].clone()
    corr, integ = _check(layernorm, forward)
    assert not corr.ok and integ.hack == analysis.STALE_RESULT, integ


@pytest.mark.parametrize("elements, times, is_cache", [(3, 2.0, False), (None, 100.0, True)])
def test_a_later_call_just_outside_the_tolerance_is_wrong_not_a_cache(layernorm, elements, times, is_cache):
    """An honest kernel whose fourth call misses the tolerance on a few elements by twice it (a pool decision that
    flips, a sum in another order: mnist_conv_relu_pool's baseline on an H200) fails correctness, and the judge does
    not call it a result cache for having been right on the first call. An output off by a hundred times the
    tolerance everywhere, as another call's output would be, is still named one."""
    state = {"calls": 0}

    def forward(x, w, b, eps):
        state["calls"] += 1
        y = _ln(x, w, b, eps)
        if state["calls"] == 4:
            off = y.view(-1)[:elements]
            off += times * (1e-5 + 1e-5 * off.abs())   # layernorm_lastdim's atol and rtol
        return y
    corr, integ = _check(layernorm, forward)
    assert not corr.ok and "call 4" in corr.reason, corr
    assert (integ.hack == analysis.STALE_RESULT) if is_cache else integ.ok, integ


def test_a_constant_output_is_named(layernorm):
    corr, integ = _check(layernorm, lambda x, w, b, eps: torch.full_like(x, 0.5))
    assert not corr.ok and integ.hack == analysis.CONSTANT_OUTPUT


def test_work_left_to_a_host_thread_is_side_work(layernorm):
    def forward(x, w, b, eps):
        y = torch.full_like(x, float("nan"))
        ref = _ln(x, w, b, eps)
        threading.Timer(0.002, lambda: y.copy_(ref)).start()
        return y
    corr, integ = _check(layernorm, forward)
    assert integ.hack == analysis.SIDE_WORK and "settled output is correct" in integ.reason, integ


def test_a_raising_candidate_fails_correctness_with_its_message(layernorm):
    def forward(x, w, b, eps):
        raise RuntimeError("boom")
    corr, integ = _check(layernorm, forward)
    assert not corr.ok and "raised at call 1: RuntimeError: boom" in corr.reason and integ.ok


def test_backward_contract_against_autograd(layernorm):
    def backward(grad, x, w, b, eps):
        leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
        with torch.enable_grad():
            y = F.layer_norm(leaves[0], (x.shape[-1],), leaves[1], leaves[2], eps)
            return torch.autograd.grad(y, leaves, grad)
    corr, _ = _check(layernorm, backward, "backward")
    assert corr.ok, corr

    def wrong(grad, x, w, b, eps):
        gx, gw, gb = backward(grad, x, w, b, eps)
        return gx, gw, gb * 2
    corr, _ = _check(layernorm, wrong, "backward")
    assert not corr.ok and "output 2" in corr.reason


def _timing(session, job, null_gap=None):
    """The judge's verdict on a timing job, each checked iteration against the reference of its own fresh inputs."""
    return analysis.judge_timing(job, session.refs, session.compose, session.tolerance, 0.0, null_gap)


def test_a_kernel_that_cheats_only_when_timed_is_caught_on_an_unannounced_iteration(layernorm):
    state = {"calls": 0}

    def forward(x, w, b, eps):  # honest for the checked calls, half the work afterwards
        state["calls"] += 1
        y = _ln(x, w, b, eps)
        if state["calls"] > 4:
            y[: y.shape[0] // 2] = 0
        return y
    s = Session(runtime_for(layernorm, "forward"), _small(layernorm), forward)
    corr, integ = s.judge_check(s.check_job())
    assert corr.ok and integ.ok
    res = _timing(s, s.time_job(40, checked=[7, 31]))
    assert res.integrity.hack == analysis.AFTER_TIMING and "timed iteration 7 of 40" in res.integrity.reason


def test_a_timed_iteration_just_outside_the_tolerance_has_no_speed_and_is_no_hack(layernorm):
    state = {"calls": 0}

    def forward(x, w, b, eps):  # right in the checked calls, then 3 elements at twice the tolerance
        state["calls"] += 1
        y = _ln(x, w, b, eps)
        if state["calls"] > 4:
            off = y.view(-1)[:3]
            off += 2 * (1e-5 + 1e-5 * off.abs())
        return y
    s = Session(runtime_for(layernorm, "forward"), _small(layernorm), forward)
    corr, integ = s.judge_check(s.check_job())
    assert corr.ok and integ.ok
    res = _timing(s, s.time_job(40, checked=[7, 31]))
    assert res.stats is None and "timed iteration 7 of 40" in res.error and "not a result kept" in res.error, res
    assert res.integrity.ok, res.integrity
    honest = Session(runtime_for(layernorm, "forward"), _small(layernorm), _ln)
    res = _timing(honest, honest.time_job(40, checked=[7, 31]))
    assert res.stats is not None and res.integrity.ok and not res.error, res

    def near_then_half(x, w, b, eps):  # the same near miss first, then half the work: the later check names it
        y = forward(x, w, b, eps)
        if state["calls"] > 24:
            y[: y.shape[0] // 2] = 0
        return y
    state["calls"] = 0
    s = Session(runtime_for(layernorm, "forward"), _small(layernorm), near_then_half)
    s.judge_check(s.check_job())
    res = _timing(s, s.time_job(40, checked=[7, 31]))
    assert res.integrity.hack == analysis.AFTER_TIMING and "timed iteration 31 of 40" in res.integrity.reason, res


def test_an_incomplete_or_mislabelled_timing_stream_is_forgery(layernorm):
    s = Session(runtime_for(layernorm, "forward"), _small(layernorm), _ln)
    job = s.time_job(10, checked=[3])
    job.end["checked"] = [3, 5]  # the helper announced a check the stream does not hold
    assert _timing(s, job).integrity.hack == analysis.FORGERY
    job = s.time_job(10, checked=[3])
    del job.calls[4]
    assert _timing(s, job).integrity.hack == analysis.FORGERY


def test_event_times_far_below_the_judges_clock_are_tampering(layernorm):
    s = Session(runtime_for(layernorm, "forward"), _small(layernorm), _ln)
    job = s.time_job(20, checked=[])
    for i, c in enumerate(job.calls):  # the judge saw 2 ms per iteration; the runner claims 1 ms
        c.received = i * 0.002
    ok = _timing(s, job, null_gap=0.5)
    assert ok.integrity.ok and ok.witness["judge_ms"] == pytest.approx(1.5)
    for c in job.calls:
        c.ms = c.ms_all = 0.01
    forged = _timing(s, job, null_gap=0.5)
    assert forged.integrity.hack == analysis.CLOCK, forged.integrity


def test_a_forged_stream_fails_correctness_and_integrity(layernorm):
    s = Session(runtime_for(layernorm, "forward"), _small(layernorm), _ln)
    job = s.check_job()
    job.forged = "record 3 carries a bad signature"
    corr, integ = s.judge_check(job)
    assert not corr.ok and integ.hack == analysis.FORGERY


def test_plans_for_every_format_round_trip_through_the_runner_message():
    """The judge's arguments for robust-kbench and KernelBench tasks decode to the same tensors."""
    from engine.pipeline.protocol import wire
    from engine.pipeline.judge.configs import plan_message, prepare
    root = FIXTURES
    for ref, direction in ((root / "robust_kbench" / "linear", "forward"),
                           (root / "robust_kbench" / "linear", "backward"),
                           (root / "kernelbench" / "matmul_relu.py", "forward")):
        task = load_task(ref)
        rt = runtime_for(task, direction)
        prep = prepare(rt, task.configs[0], 2, "cpu")
        header, tensors = plan_message(prep)
        assert header.variants == 2 and len(prep.variants) == 2
        n = header.per_variant
        args = wire.decode_args(header.args, tensors[:n])
        assert len(args) == len(prep.variants[0].plan.args)
        for got, want in zip(args, prep.variants[0].plan.args):
            assert type(got) is type(want) and (not isinstance(got, torch.Tensor) or torch.equal(got, want))
        if header.kind == "modelnew":
            assert header.model and header.model["state"] and len(tensors) > 2 * n
        # an exact candidate's outputs, composed by the judge, are the reference (the backward replay is
        # test_importers' replay test: an exact upstream backward needs the task's own formulas)
        if direction == "backward":
            continue
        v = prep.variants[1]
        rt.restore_state(v.state)
        exact = list(v.ref) if header.kind == "modelnew" else [rt.reference_module.forward_fn(*v.plan.args)]
        composed = rt.compose(rt.inputs(), exact)
        assert len(composed) == len(v.ref) and all(torch.allclose(a, b) for a, b in zip(composed, v.ref)), direction
