"""A reference that draws random numbers (a dropout left in training mode, as KernelBench's level 2 problems 66 and
83): the judge finds it out by computing the reference twice, then it and the runner seed torch's generators before
every call with the variant's seed, as KernelBench's eval seeds both models, so the problem's own Model computes
what the reference computed. The GPU run is tests/pipeline/test_gpu_numerics.py."""

from __future__ import annotations

import pytest
import torch

from engine.harness.runtimes import runtime_for
from engine.pipeline.protocol import messages as msg
from engine.pipeline.judge.configs import plan_message, prepare, seeded
from engine.pipeline.runner.main import seeded_calls
from engine.tasks.loader import load_task
from tests.paths import FIXTURES

DROPOUT = FIXTURES / "kernelbench" / "linear_dropout.py"


def _prepared(path):
    task = load_task(path)
    rt = runtime_for(task, "forward")
    prep = prepare(rt, task.configs[0], 2, "cpu")
    return rt, prep


def test_a_reference_that_draws_random_numbers_is_seeded_per_variant_and_a_deterministic_one_is_not():
    rt, prep = _prepared(DROPOUT)
    seeds = [v.plan.call_seed for v in prep.variants]
    assert None not in seeds and len(set(seeds)) == 2
    for v in prep.variants:                     # each reference is what its seeded call gives
        rt.restore_state(v.state)
        assert torch.equal(seeded(v.plan.call_seed, lambda: rt.reference(rt.inputs()))[0], v.ref[0])
    header, _ = plan_message(prep)
    assert header.call_seeds == tuple(seeds)
    _, plain = _prepared(FIXTURES / "kernelbench" / "matmul_relu.py")
    assert all(v.plan.call_seed is None for v in plain.variants) and plan_message(plain)[0].call_seeds is None


def test_the_runners_seeded_call_of_the_problems_own_model_gives_each_variants_reference():
    """The runner's side (runner.seeded_calls) with the helper's current variant stood in for: the problem's own
    Model, built as the runner builds ModelNew, on each variant's inputs, matches that variant's reference."""
    rt, prep = _prepared(DROPOUT)
    header, _ = plan_message(prep)
    mod = rt.reference_module
    torch.manual_seed(prep.variants[0].plan.model_seed)
    model = mod.Model(*prep.variants[0].plan.model_init)
    model.load_state_dict(prep.variants[0].plan.model_state)
    current = [0]
    live: list = []

    def call():
        with torch.no_grad():
            return model(*live)
    call = seeded_calls(call, header.call_seeds, lambda: current[0])
    for v in (1, 0, 1):
        current[0], live[:] = v, list(prep.variants[v].plan.args)
        assert torch.equal(call(), prep.variants[v].ref[0]), v
    unseeded = model(*prep.variants[0].plan.args)       # the premise: without the seed the draws differ
    assert not torch.allclose(unseeded, prep.variants[0].ref[0], atol=1e-4, rtol=1e-4)


def test_a_config_message_with_a_seed_per_variant_only():
    base = dict(cid="c", kind="fn", entry="forward", args=None, variants=2, per_variant=1)
    assert msg.Config(**base, call_seeds=(1, 2)).call_seeds == (1, 2)
    with pytest.raises(msg.MessageError, match="1 call seeds for 2 variants"):
        msg.Config(**base, call_seeds=(1,))
