"""The upstream mode draws a trial's model and inputs as the benchmark's own evaluation does, so a verdict on an
imported folder or problem file can be set beside upstream's results: robust-kbench (sandbox/correct_forward_fn.py,
correct_backward_fn.py) seeds torch with 42, takes one randint(0, 2**32 - 1) per trial, and under each trial's
seed draws the inputs (on the CPU, then moved), the model and, backward, randn_like(output); KernelBench
(run_and_check_correctness) builds the model once under 42 and draws each trial's inputs under the trial's seed.

`upstream_trial` below is that procedure written from upstream's description, independently of kbench's runtimes;
the runtimes must reproduce its tensors bit for bit under `upstream_draws`, and differ from them without it (kbench's
own seeds: inputs under seed + 1, drawn on the GPU where there is one)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from engine.harness.runtimes import runtime_for
from engine.harness.runtimes.kernelbench import UPSTREAM_MODEL_SEED
from engine.pipeline.judge.configs import prepare, upstream_trial_seeds
from engine.tasks.loader import load_task
from tests.paths import FIXTURES

RKB_LINEAR = FIXTURES / "robust_kbench" / "linear"
KB_MATMUL = FIXTURES / "kernelbench" / "matmul_relu.py"


def _module(path):
    spec = importlib.util.spec_from_file_location(f"upstream_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _global_seed_list(n: int) -> list[int]:
    torch.manual_seed(42)
    return [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(n)]


def upstream_trial(mod, input_settings: dict, init_settings: dict, seed: int, backward: bool = False):
    """One robust-kbench trial's tensors: inputs, then the model, each under set_seed(trial seed); backward, the
    output's gradient under the same seed again."""
    torch.manual_seed(seed)
    inputs = list(mod.get_inputs(**input_settings))
    torch.manual_seed(seed)
    model = mod.Model(**init_settings)
    grad = None
    if backward:
        out = model(*inputs)
        torch.manual_seed(seed)
        grad = torch.randn_like(out)
    return inputs, model, grad


def test_the_trial_seeds_are_upstreams_and_leave_torchs_generator_alone():
    expected = _global_seed_list(5)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    assert list(upstream_trial_seeds(5)) == expected
    assert torch.equal(torch.get_rng_state(), before)
    assert len(set(expected)) == 5 and all(0 <= s < 2**32 for s in expected)


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_a_robust_kbench_trial_is_drawn_as_upstream_draws_it(direction):
    task = load_task(str(RKB_LINEAR))
    cfg = task.configs[0]
    mod = _module(RKB_LINEAR / f"func_{direction}.py")
    seed = upstream_trial_seeds(2)[1]
    inputs, model, grad = upstream_trial(mod, cfg.input_kwargs, cfg.model_kwargs, seed, direction == "backward")

    rt = runtime_for(task, direction)
    rt.upstream_draws = True
    rt.setup(cfg, seed, "cpu")
    assert all(torch.equal(a, b) for a, b in zip(rt.pristine(), inputs, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(rt._model.state_dict().values(), model.state_dict().values(),
                                                   strict=True))
    if direction == "backward":
        (mine,) = rt._grad_outputs
        assert torch.equal(mine, grad)

    own = runtime_for(task, direction)          # kbench's own draws: the inputs under seed + 1
    own.setup(cfg, seed, "cpu")
    assert not torch.equal(own.pristine()[0], inputs[0])


def test_a_kernelbench_trial_keeps_the_model_of_seed_42_and_draws_its_inputs_under_the_trials_seed():
    task = load_task(str(KB_MATMUL))
    cfg = task.configs[0]
    mod = _module(KB_MATMUL)
    seeds = upstream_trial_seeds(3)
    torch.manual_seed(42)
    init = mod.get_init_inputs()
    torch.manual_seed(42)
    model = mod.Model(*init)

    rt = runtime_for(task, "forward")
    rt.upstream_draws = True
    rt.setup(cfg, seeds[0], "cpu")
    assert UPSTREAM_MODEL_SEED == 42
    for s in seeds:
        rt.reseed_inputs(cfg, s, "cpu")
        torch.manual_seed(s)
        assert torch.equal(rt.pristine()[0], mod.get_inputs()[0])
        assert all(torch.equal(a, b) for a, b in zip(rt._model.state_dict().values(), model.state_dict().values(),
                                                       strict=True))
    assert rt.call_plan(rt.pristine()).model_seed == 42    # ModelNew is built under seed_num too


def test_the_judges_preparation_takes_the_requests_seeds():
    """prepare() with upstream's seeds: each variant is upstream's trial of that index (the judge passes
    upstream_trial_seeds when the request asks for upstream draws)."""
    task = load_task(str(RKB_LINEAR))
    cfg = task.configs[0]
    mod = _module(RKB_LINEAR / "func_forward.py")
    rt = runtime_for(task, "forward")
    rt.upstream_draws = True
    seeds = upstream_trial_seeds(3)
    prep = prepare(rt, cfg, 3, torch.device("cpu"), seeds)
    assert [v.seed for v in prep.variants] == list(seeds)
    for v, s in zip(prep.variants, seeds):
        inputs, model, _ = upstream_trial(mod, cfg.input_kwargs, cfg.model_kwargs, s)
        with torch.no_grad():
            assert torch.equal(v.ref[0], model(*inputs))


@pytest.mark.gpu
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_on_a_gpu_upstream_draws_on_the_cpu_and_moves_where_kbench_draws_on_the_gpu(direction):
    """Upstream's get_inputs and Model run on the CPU and are moved (easy_to_device, .to("cuda")); the gradient is
    randn_like the CUDA output. kbench's own draws go straight to the GPU's generator: other values."""
    task = load_task(str(RKB_LINEAR))
    cfg = task.configs[0]
    mod = _module(RKB_LINEAR / f"func_{direction}.py")
    seed = upstream_trial_seeds(1)[0]
    torch.manual_seed(seed)
    inputs = [t.detach().to("cuda").requires_grad_(t.requires_grad) for t in mod.get_inputs(**cfg.input_kwargs)]
    torch.manual_seed(seed)
    model = mod.Model(**cfg.model_kwargs).to("cuda")
    rt = runtime_for(task, direction)
    rt.upstream_draws = True
    rt.setup(cfg, seed, torch.device("cuda"))
    assert all(a.is_cuda and torch.equal(a, b) for a, b in zip(rt.pristine(), inputs, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(rt._model.state_dict().values(), model.state_dict().values(),
                                                   strict=True))
    if direction == "backward":
        out = model(*inputs)
        torch.manual_seed(seed)
        assert torch.equal(rt._grad_outputs[0], torch.randn_like(out))
    own = runtime_for(task, direction)
    own.setup(cfg, seed, torch.device("cuda"))
    assert not torch.equal(own.pristine()[0], inputs[0])
