"""Fresh inputs for every call (engine/pipeline/judge/fresh.py): the factors keep what a problem's get_inputs promises,
each config gets the weakest spread under which two calls' references differ beyond the tolerance, the judge
rebuilds a checked call's inputs from its seed, and a content-keyed cache never hits while a cache keyed on what the
factors leave alone fails its checked calls. The stand-in helper (tests/doubles/timing_helper.py) draws the factors as
the compiled helper does (bit for bit: tests/pipeline/test_timer_build.py); the GPU catalog is
tests/integrity/test_gpu_exploits.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.harness.runtimes import runtime_for
from engine.pipeline.judge import analysis
from engine.pipeline.judge.fresh import KEEP, SCALE, SIGN, SYMMETRIC, choose, emulated, modes_for
from engine.pipeline.judge.configs import plan_message, prepare
from engine.tasks.loader import load_task
from tests.doubles.timing_helper import Session
from tests.paths import FIXTURES

KB = FIXTURES / "kernelbench"


def test_the_factors_keep_signs_zeros_symmetry_and_sign_tensors_and_differ_per_seed():
    g = torch.Generator().manual_seed(0)
    tri = torch.randn(6, 6, generator=g).abs().triu()
    sym = torch.randn(5, 5, generator=g)
    sym = sym + sym.t()
    signs = torch.randint(0, 2, (40,), generator=g).float() * 2 - 1
    mask = torch.randint(0, 2, (40,), generator=g).float()
    ts = [tri, sym, signs, mask]
    modes = (SCALE, SYMMETRIC, SIGN, KEEP)
    a, b = emulated(ts, 1, modes, (0.5,) * 4), emulated(ts, 2, modes, (0.5,) * 4)
    assert torch.equal(a[0] == 0, tri == 0) and bool((a[0] >= 0).all()) and not torch.equal(a[0], tri)
    assert torch.equal(a[1], a[1].t()) and not torch.equal(a[1], sym)
    assert set(a[2].tolist()) <= {-1.0, 1.0} and not torch.equal(a[2], signs) and torch.equal(a[3], mask)
    assert all(torch.equal(x, y) for x, y in zip(a, emulated(ts, 1, modes, (0.5,) * 4)))    # the seed decides
    assert not torch.equal(a[0], b[0]) and not torch.equal(a[1], b[1])
    ratio = a[0][tri != 0] / tri[tri != 0]
    assert float(ratio.min()) >= 0.5 and float(ratio.max()) < 1.5


def test_each_tensor_gets_the_mode_its_values_allow():
    sym = torch.ones(2, 4, 4)
    per_variant = [[torch.randn(8, 3), torch.tensor([1.0, -1.0, 1.0]), torch.tensor([0.0, 1.0]), sym + 1,
                    torch.arange(4), torch.randn(3, 3)]]
    assert modes_for(per_variant, [True, True, True, True, True, False]) == (SCALE, SIGN, KEEP, SYMMETRIC, KEEP,
                                                                             KEEP)


@pytest.mark.parametrize("problem, modes", [("log_positive.py", (SCALE,)), ("hinge_targets.py", (SCALE, SIGN)),
                                            ("symmetric_matmul.py", (SYMMETRIC, SYMMETRIC))])
def test_a_problems_preconditions_hold_for_every_call(problem, modes):
    """KernelBench problems whose get_inputs promises something (positive inputs to a log, +-1 targets,
    symmetric matrices): the modes keep it, and the calls still separate."""
    task = load_task(KB / problem)
    rt = runtime_for(task, "forward")
    prep = prepare(rt, task.configs[0], 2, "cpu")
    fresh = prep.fresh = choose(rt, prep, analysis.tolerance(rt), emulated)
    assert fresh.modes == modes and fresh.separated, fresh
    header, _ = plan_message(prep)
    assert header.fresh_modes == modes and header.fresh_alphas == fresh.alphas


def test_the_weakest_spread_that_separates_two_calls_is_chosen_and_a_reference_that_barely_moves_says_so(layernorm):
    rt = runtime_for(layernorm, "forward")
    prep = prepare(rt, next(c for c in layernorm.configs if c.name == "odd-small"), 2, "cpu")
    fresh = choose(rt, prep, analysis.tolerance(rt), emulated)
    assert fresh.separated and fresh.alpha == 1 / 16 and fresh.active
    # a mean of squares over 4M elements: every call's factors shift it by the same amount, and two calls differ by
    # far less than the tolerance: no spread separates them, and the result says so (the floor is what remains)
    task = load_task(KB / "mean_of_squares.py")
    rt = runtime_for(task, "forward")
    prep = prepare(rt, task.configs[0], 2, "cpu")
    fresh = choose(rt, prep, analysis.tolerance(rt), emulated)
    assert not fresh.separated and fresh.alpha == 1 / 2 and "barely moves with its inputs" in fresh.why


def _ln(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def test_a_content_keyed_cache_never_hits_and_every_checked_call_is_judged_on_its_own_inputs(layernorm):
    cache: dict = {}
    hits = []

    def content_cache(x, w, b, eps):   # keyed on every byte of every input: the family the judge used to miss
        key = tuple(hash(t.numpy().tobytes()) for t in (x, w, b))
        hits.append(key in cache)
        return cache.setdefault(key, _ln(x, w, b, eps)).clone()
    s = Session(runtime_for(layernorm, "forward"), next(c for c in layernorm.configs if c.name == "odd-small"),
                content_cache)
    corr, integ = s.judge_check(s.check_job())
    res = analysis.judge_timing(s.time_job(40, checked=[3, 17, 38]), s.refs, s.compose, s.tolerance, 0.0, None,
                                checks=2)
    assert corr.ok and integ.ok and res.integrity.ok and not any(hits) and len(hits) == 44


def test_a_cache_keyed_on_what_the_factors_leave_alone_fails_its_checked_calls(layernorm):
    """Keyed on the inputs' signs (which scaling by 1 +- alpha keeps): it hits on every later call and returns
    another call's output, which the chosen spread puts beyond the tolerance."""
    cache: dict = {}

    def sign_cache(x, w, b, eps):
        return cache.setdefault(tuple(torch.sign(x).flatten().tolist()), _ln(x, w, b, eps)).clone()
    s = Session(runtime_for(layernorm, "forward"), next(c for c in layernorm.configs if c.name == "odd-small"),
                sign_cache)
    corr, integ = s.judge_check(s.check_job())
    assert not corr.ok and integ.hack == analysis.STALE_RESULT and "an output kept from an earlier call" in \
        integ.reason, integ
    cache.clear()
    res = analysis.judge_timing(s.time_job(40, checked=[3, 17, 38]), s.refs, s.compose, s.tolerance, 0.0, None,
                                checks=2)
    assert res.integrity.hack == analysis.AFTER_TIMING and "timed iteration 3 of 40" in res.integrity.reason


def test_a_timing_job_without_a_check_in_its_last_tenth_is_no_stream_of_the_helpers(layernorm):
    s = Session(runtime_for(layernorm, "forward"), next(c for c in layernorm.configs if c.name == "odd-small"), _ln)
    ok = analysis.judge_timing(s.time_job(40, checked=[3, 37]), s.refs, s.compose, s.tolerance, 0.0, None, checks=1)
    assert ok.integrity.ok and ok.stats is not None
    bad = analysis.judge_timing(s.time_job(40, checked=[3, 17]), s.refs, s.compose, s.tolerance, 0.0, None, checks=2)
    assert bad.integrity.hack == analysis.FORGERY and "last tenth of 40" in bad.integrity.reason


def test_separated_compares_chunk_by_chunk_with_the_whole_outputs_verdict(monkeypatch):
    """`separated` compares CHUNK elements at a time (isclose's temporaries on a 4 GiB output took the judge to
    seven times its footprint): chunked, it counts the very elements a whole comparison counts, across chunk
    edges, against a reference of another dtype or on another device."""
    from engine.pipeline.judge import fresh as fresh_mod
    from engine.pipeline.judge.analysis import Tolerance
    tol = Tolerance(1e-3, 1e-3, 0.01)
    g = torch.Generator().manual_seed(5)
    y = torch.randn(37, 53, generator=g)
    for n_off in (0, 19, 20, 21, 400):    # the budget is 1 % of 1961 elements: 19.61
        x = y.clone()
        x.view(-1)[torch.randperm(y.numel(), generator=g)[:n_off]] += 1.0
        whole = fresh_mod.separated((x,), (y.double(),), tol)
        monkeypatch.setattr(fresh_mod, "CHUNK", 7)
        assert fresh_mod.separated((x,), (y.double(),), tol) is whole is (n_off > 19.61), n_off
        assert fresh_mod._misses(x, y.double(), tol) == n_off
        monkeypatch.setattr(fresh_mod, "CHUNK", 1 << 24)
    # a non-contiguous output is compared element for element all the same
    assert fresh_mod._misses(y.t(), y.t().contiguous(), tol) == 0
