"""robust-kbench and KernelBench importers and runtimes (docs/formats.md, "Imported task formats").

The fixtures are hand-written in the exact shapes of the upstream repositories (SakanaAI/robust-kbench task
folders, ScalingIntelligence/KernelBench problem files). CPU tests use pure-torch fake candidates; the CUDA
fixtures are judged end to end in tests/cli/test_gpu_eval.py.
"""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from engine.candidates import load_candidate
from engine.errors import TaskError
from engine.harness.runtimes import runtime_for
from engine.harness.runtimes.base import import_file
from engine.harness.runtimes.kernelbench import KernelBenchRuntime, cast_floats
from engine.harness.runtimes.robust_kbench import RobustKbenchRuntime
from engine.tasks import pysource
from engine.tasks.kernelbench import load_kernelbench, size_variant
from engine.tasks.loader import load_task
from engine.tasks.model import Task, Tolerance
from engine.tasks.robust_kbench import find_class, is_robust_kbench_task, load_robust_kbench
from tests.paths import FIXTURES

RKB = FIXTURES / "robust_kbench"
RKB_TASK = RKB / "linear"
RKB_CANDIDATES = RKB / "candidates"
KB = FIXTURES / "kernelbench"
KB_CANDIDATES = KB / "candidates"


def close(a: tuple, b: tuple, tol: Tolerance) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and torch.allclose(x, y, atol=tol.atol, rtol=tol.rtol) for x, y in zip(a, b))


@pytest.fixture
def rkb(tmp_path: Path) -> Path:
    """A writable copy of the robust-kbench linear fixture task."""
    return Path(shutil.copytree(RKB_TASK, tmp_path / "linear"))


def write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj))


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"fixture changed: {old!r} not in {path.name}"
    path.write_text(text.replace(old, new))


ONE = {"single_input_configs": [{"batch_size": 5}], "single_init_configs": [{"out_features": 3}],
       "single_shared_configs": [{"in_features": 4}]}


# --- robust-kbench loading ------------------------------------------------------------------------------


def test_robust_kbench_fixture_loads():
    t = load_task(RKB_TASK)
    assert t.format == "robust-kbench" and t.name == "linear" and t.dtype == "float32"
    assert set(t.directions) == {"forward", "backward"}
    fwd, bwd = t.spec("forward"), t.spec("backward")
    assert fwd.reference_path == (RKB_TASK / "func_forward.py").resolve()
    assert bwd.reference_path == (RKB_TASK / "func_backward.py").resolve()
    assert fwd.signature == "forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor"
    # upstream's backward kernel takes what AutogradFunction.backward passes it: here (grad_output, x, weight)
    assert bwd.signature == "backward(grad_output, x, weight) -> (grad_x, grad_weight, grad_bias)"
    assert fwd.tolerance == Tolerance(1e-5, 1e-5) and bwd.tolerance == Tolerance(1e-4, 1e-4)
    assert t.description.startswith("Affine map")
    assert len({c.seed for c in t.configs}) == len(t.configs) == len({c.name for c in t.configs})
    assert all(c.init == "normal" and c.cost == {} for c in t.configs)
    assert Task.from_json(json.loads(json.dumps(t.to_json()))) == t


def test_every_settings_mode_gives_configs():
    """Upstream evaluates its `single` settings by default, and with --multi_input_settings and/or
    --multi_init_settings the multi lists of that kind (the multi shared list only with both): kbench runs all four
    modes, each config tagged with the modes that hold it."""
    t = load_robust_kbench(RKB_TASK)
    got = {(c.model_kwargs["out_features"], c.input_kwargs["batch_size"], c.model_kwargs["in_features"]): c
           for c in t.configs}
    multi = {(o, b, i) for o in (65, 128) for b in (7, 33) for i in (100, 37)}
    multi_input = {(32, b, 64) for b in (7, 33)}          # the single init and shared lists, every multi input
    multi_init = {(o, 16, 64) for o in (65, 128)}
    assert set(got) == multi | multi_input | multi_init | {(32, 16, 64)}
    assert all("multi-input" in got[k].tags and "multi" not in got[k].tags for k in multi_input)
    assert all("multi-init" in got[k].tags and "single" not in got[k].tags for k in multi_init)
    # the backward file's multi-input list holds only batch 7
    assert "backward" in got[(32, 7, 64)].tags and "backward" not in got[(32, 33, 64)].tags
    single = got[(32, 16, 64)]
    # in both files' single lists; upstream's default run, so timed by default (engine.tasks.model)
    assert single.tags == ("robust-kbench", "single", "backward", "forward", "timed")
    assert got[(65, 7, 37)].tags == ("robust-kbench", "multi", "backward", "forward")
    assert got[(128, 33, 100)].tags == ("robust-kbench", "multi", "forward")
    for c in t.configs:  # the shared key reaches both Model(**init) and get_inputs(**input)
        assert set(c.model_kwargs) == {"out_features", "in_features"}
        assert set(c.input_kwargs) == {"batch_size", "in_features"}
    named = {c.name: c for c in t.configs}
    assert named["out_features=65,in_features=37,batch_size=33"].input_kwargs == {"batch_size": 33,
                                                                                  "in_features": 37}


def test_shared_settings_override_like_upstream(rkb: Path):
    """robust-kbench applies the shared settings last ("to allow overriding"): a clash is not an error."""
    write_json(rkb / "config_forward.json", {**ONE, "single_input_configs": [{"batch_size": 5, "in_features": 9}]})
    write_json(rkb / "config_backward.json", ONE)
    t = load_robust_kbench(rkb)
    assert [(c.model_kwargs, c.input_kwargs) for c in t.configs] == [
        ({"out_features": 3, "in_features": 4}, {"batch_size": 5, "in_features": 4})]


def test_one_mode_missing_falls_back_to_the_other(rkb: Path):
    (rkb / "func_backward.py").unlink()
    (rkb / "config_backward.json").unlink()
    write_json(rkb / "config_forward.json", {**ONE, "multi_input_configs": [],
                                             "multi_init_configs": [{"out_features": 9}]})
    t = load_robust_kbench(rkb)
    assert list(t.directions) == ["forward"]
    # single: ONE as is; multi-input: no input settings ([] = none); multi-init: out_features 9 with the single
    # input; multi: both, the single shared list in every mode
    assert [(c.model_kwargs, c.input_kwargs) for c in t.configs] == [
        ({"out_features": 3, "in_features": 4}, {"batch_size": 5, "in_features": 4}),
        ({"out_features": 3, "in_features": 4}, {"in_features": 4}),
        ({"out_features": 9, "in_features": 4}, {"batch_size": 5, "in_features": 4}),
        ({"out_features": 9, "in_features": 4}, {"in_features": 4})]
    write_json(rkb / "config_forward.json", ONE)
    t = load_robust_kbench(rkb)
    assert len(t.configs) == 1 and t.configs[0].name == "default" and "multi" not in t.configs[0].tags


def test_backward_only_task_and_config_union(rkb: Path):
    write_json(rkb / "config_forward.json", ONE)
    write_json(rkb / "config_backward.json", {**ONE, "single_input_configs": [{"batch_size": 6}]})
    t = load_robust_kbench(rkb)
    assert [c.name for c in t.configs] == ["batch_size=5", "batch_size=6"]
    assert [c.tags for c in t.configs] == [("robust-kbench", "single", "forward", "timed"),
                                           ("robust-kbench", "single", "backward", "timed")]
    (rkb / "func_forward.py").unlink()
    t = load_robust_kbench(rkb)
    assert list(t.directions) == ["backward"] and len(t.configs) == 1


@pytest.mark.parametrize("extra, expected", [
    ({}, Tolerance(1e-5, 1e-5)),        # robust-kbench's own default, forward and backward alike
    ({"op_atol": 2e-3, "op_rtol": 3e-3}, Tolerance(2e-3, 3e-3)),
    ({"tolerance": {"atol": 1e-2}}, Tolerance(1e-2, 1e-5)),
    ({"atol": 0}, Tolerance(0.0, 1e-5)),
])
def test_tolerance_keys(rkb: Path, extra: dict, expected: Tolerance):
    write_json(rkb / "config_forward.json", {**ONE, **extra})
    write_json(rkb / "config_backward.json", {**ONE, **extra})
    t = load_robust_kbench(rkb)
    assert t.spec("forward").tolerance == expected and t.spec("backward").tolerance == expected


def test_is_robust_kbench_task(rkb: Path, tmp_path: Path):
    assert is_robust_kbench_task(rkb)
    assert not is_robust_kbench_task(tmp_path / "nothing")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert not is_robust_kbench_task(empty)
    with pytest.raises(TaskError, match="not a task folder"):
        load_task(empty)


# Each case breaks one file of the task; the message must name that file and the cause.
BROKEN = [
    ("config_forward.json", None, "config_forward.json: missing"),
    ("config_forward.json", "{ not json", r"config_forward.json:1: not valid JSON"),
    ("config_forward.json", "[1, 2]", "config_forward.json: the top level must be a JSON object"),
    ("config_forward.json", {"single_input_configs": [{}], "single_shared_configs": [{}]},
     "config_forward.json: missing required key `single_init_configs`"),
    ("config_forward.json", {**ONE, "multi_input_configs": {"batch_size": 3}},
     "config_forward.json: `multi_input_configs` must be a list"),
    ("config_forward.json", {**ONE, "single_init_configs": [{"out_features": 3}, 7]},
     r"config_forward.json: `single_init_configs` item #2 must be a JSON object"),
    ("config_forward.json", {**ONE, "single_init_configs": [{"out_features": 3, "hidden": 2}]},
     "config_forward.json: setting\\(s\\) 'hidden' are not accepted by Model.__init__ in func_forward.py"),
    ("config_forward.json", {**ONE, "single_shared_configs": [{"in_features": 4, "out_features": 2}],
                             "single_init_configs": [{}]},
     "config_forward.json: setting\\(s\\) 'out_features' are not accepted by get_inputs"),
    ("config_backward.json", {**ONE, "atol": "small"}, "config_backward.json: `atol` must be a non-negative"),
    ("func_forward.py", "def forward_fn(x:\n", r"func_forward.py:\d+: Python syntax error"),
    ("func_forward.py", ("def forward_fn(", "def other_fn("), "func_forward.py: no top-level function `forward_fn`"),
    ("func_forward.py", ("def get_inputs(", "def make_inputs("), "func_forward.py: no top-level function `get_inputs`"),
    ("func_forward.py", ("class Model(", "class Net("), "func_forward.py: no top-level class `Model`"),
    ("func_forward.py", ("x: torch.Tensor, fn=forward_fn)", "x: torch.Tensor)"),
     "func_forward.py: Model.forward must take a parameter `fn`"),
    ("func_backward.py", ("class AutogradFunction(", "class LinearFunction("),
     "func_backward.py: no class `AutogradFunction` with a `backward` method"),
    ("func_backward.py", ("    backward_fn = None\n", ""),
     "func_backward.py: class `AutogradFunction` has no class attribute `backward_fn`"),
    ("func_backward.py", ("AutogradFunction.backward_fn(grad_output, x, weight)",
                          "(grad_output @ weight, grad_output.t() @ x, grad_output.sum(0))"),
     "func_backward.py: AutogradFunction.backward never calls `AutogradFunction.backward_fn"),
]


@pytest.mark.parametrize("filename, change, message", BROKEN, ids=[f"{b[0]}:{b[2][:40]}" for b in BROKEN])
def test_malformed_task_errors_name_the_file(rkb: Path, filename: str, change, message: str):
    path = rkb / filename
    if change is None:
        path.unlink()
    elif isinstance(change, tuple):
        edit(path, *change)
    elif isinstance(change, dict):
        write_json(path, change)
        other = rkb / ("config_backward.json" if filename == "config_forward.json" else "config_forward.json")
        write_json(other, ONE)
    else:
        path.write_text(change)
    with pytest.raises(TaskError, match=message) as info:
        load_task(rkb)
    assert str(rkb / filename) in str(info.value)


def test_a_module_level_backward_fn_is_not_the_convention(rkb: Path):
    """kbench once read `def backward_fn` at module level; upstream's files never do, so say what they do."""
    edit(rkb / "func_backward.py", "    backward_fn = None\n", "")
    edit(rkb / "func_backward.py", "def forward_fn(", "def backward_fn(g, x, w):\n    return g @ w\n\n\ndef forward_fn(")
    with pytest.raises(TaskError, match="module-level `def backward_fn` is not robust-kbench's convention"):
        load_task(rkb)


def test_a_setting_only_the_other_direction_takes_is_noted_not_fatal():
    """Upstream's mnist_pool passes `kernel_size` to a forward Model that takes no settings (upstream's own forward
    run would raise TypeError); kbench loads the task, says so, and calls each Model with what it takes."""
    t = load_task(RKB / "pool")
    assert set(t.directions) == {"forward", "backward"}
    assert all(c.model_kwargs == {"kernel_size": 2} for c in t.configs)
    assert len(t.notes) == 1 and "'kernel_size'" in t.notes[0] and "func_forward.py" in t.notes[0]
    assert t.spec("backward").signature == "backward(saved, grad_output) -> grad_input"
    rt = runtime_for(t, "forward")
    rt.setup(t.configs[1], 0, "cpu")
    assert rt.reference(rt.inputs())[0].shape == (3, 5, 6, 3)


def test_a_setting_no_module_takes_is_an_error(rkb: Path):
    write_json(rkb / "config_forward.json", ONE)
    write_json(rkb / "config_backward.json", {**ONE, "single_init_configs": [{"out_features": 3, "extra": 1}]})
    with pytest.raises(TaskError, match="'extra' are not accepted by Model.__init__ in func_forward.py or "
                                        "func_backward.py") as info:
        load_task(rkb)
    assert "config_backward.json" in str(info.value)


# --- robust-kbench runtime on CPU -----------------------------------------------------------------------


def fwd_correct(x, weight, bias):
    return torch.einsum("bk,nk->bn", x, weight) + bias


def fwd_wrong(x, weight, bias):
    # Mirrors linear_forward_wrong.cu: an unroll by 2 with no tail drops the last term on odd K.
    k = x.shape[1] - x.shape[1] % 2
    return x[:, :k] @ weight[:, :k].t() + bias


def bwd_correct(grad_output, x, weight):
    return (torch.einsum("bn,nk->bk", grad_output, weight), torch.einsum("bn,bk->nk", grad_output, x),
            grad_output.sum(0))


def bwd_wrong(grad_output, x, weight):
    # Mirrors linear_backward_wrong.cu: grad_bias skips batch row 0. Returned as a list, as pybind returns a vector.
    gx, gw, _ = bwd_correct(grad_output, x, weight)
    return [gx, gw, grad_output[1:].sum(0)]


GOOD = types.SimpleNamespace(forward=fwd_correct, backward=bwd_correct)
BAD = types.SimpleNamespace(forward=fwd_wrong, backward=bwd_wrong)


def test_runtime_dispatch():
    assert isinstance(runtime_for(load_task(RKB_TASK), "backward"), RobustKbenchRuntime)
    assert isinstance(runtime_for(load_task(KB / "scaled_swish.py"), "forward"), KernelBenchRuntime)
    with pytest.raises(KeyError, match="no backward direction"):
        KernelBenchRuntime(load_task(KB / "scaled_swish.py"), "backward")


def test_robust_kbench_forward_runtime():
    task = load_task(RKB_TASK)
    rt = runtime_for(task, "forward")
    tol = task.spec("forward").tolerance
    for config in task.configs:
        rt.setup(config, config.seed, "cpu")
        pristine = [t.clone() for t in rt.pristine()]
        ref = rt.reference(rt.inputs())
        assert ref[0].shape == (config.input_kwargs["batch_size"], config.model_kwargs["out_features"])
        assert close(rt.candidate(GOOD, rt.inputs()), ref, tol)
        odd = config.input_kwargs["in_features"] % 2 == 1
        assert close(rt.candidate(BAD, rt.inputs()), ref, tol) is not odd, config.name
        assert all(torch.equal(a, b) for a, b in zip(pristine, rt.pristine()))
    assert rt.candidate_callable(GOOD)().shape == ref[0].shape  # timing callables return the raw output
    assert rt.eager_callable()().shape == ref[0].shape


def test_robust_kbench_backward_through_the_class_attribute():
    task = load_task(RKB_TASK)
    rt = runtime_for(task, "backward")
    tol = task.spec("backward").tolerance
    cls = rt.reference_module.AutogradFunction
    for config in task.configs:
        rt.setup(config, config.seed, "cpu")
        assert rt.pristine()[0].requires_grad  # get_inputs marks x, as upstream's files do
        ref = rt.reference(rt.inputs())
        b, k, n = (config.input_kwargs["batch_size"], config.input_kwargs["in_features"],
                   config.model_kwargs["out_features"])
        # the inputs that require grad, then every parameter: x, weight, bias
        assert [tuple(g.shape) for g in ref] == [(b, k), (n, k), (n,)]
        assert all(torch.equal(x, y) for x, y in zip(ref, rt.reference(rt.inputs())))  # fixed grad_output
        assert close(rt.candidate(GOOD, rt.inputs()), ref, tol)
        assert not close(rt.candidate(BAD, rt.inputs()), ref, tol)
        assert cls.__dict__["backward_fn"] is None  # restored after each run
    # the reference is plain autograd through forward_fn
    x = rt.inputs()[0]
    model = rt._model
    y = x @ model.weight.t() + model.bias
    auto = torch.autograd.grad(y, [x, model.weight, model.bias], rt._grad_outputs[0])
    assert close(rt.reference(rt.inputs()), auto, tol)


def test_the_candidate_runs_inside_autograd_function():
    """The candidate gets exactly what AutogradFunction.backward passes, during model(..., fn=apply).backward."""
    task = load_task(RKB_TASK)
    rt = runtime_for(task, "backward")
    config = task.configs[0]
    rt.setup(config, config.seed, "cpu")
    seen = []

    def spy(*args):
        seen.append(args)
        return bwd_correct(*args)

    rt.candidate(types.SimpleNamespace(backward=spy), rt.inputs())
    b, k, n = (config.input_kwargs["batch_size"], config.input_kwargs["in_features"],
               config.model_kwargs["out_features"])
    assert len(seen) == 1 and [tuple(a.shape) for a in seen[0]] == [(b, n), (b, k), (n, k)]
    assert torch.equal(seen[0][0], rt._grad_outputs[0])


def test_kernel_calls_and_replay_give_the_candidates_result():
    """The judge's half: the entry point's exact arguments out, its return values in, the same verdict."""
    task = load_task(RKB_TASK)
    for direction, module in (("forward", GOOD), ("backward", GOOD), ("backward", BAD)):
        rt = runtime_for(task, direction)
        config = task.configs[2]
        rt.setup(config, config.seed, "cpu")
        calls = rt.kernel_calls(rt.inputs())
        assert len(calls) == 1 and not any(getattr(a, "requires_grad", False) for a in calls[0])
        entry = getattr(module, direction)
        replayed = rt.outputs_from_kernel(rt.inputs(), [entry(*args) for args in calls])
        direct = rt.candidate(module, rt.inputs())
        assert all(torch.equal(a, b) for a, b in zip(replayed, direct)), direction
    pool = load_task(RKB / "pool")
    rt = runtime_for(pool, "backward")
    rt.setup(pool.configs[-1], 0, "cpu")
    (saved, grad_output), = rt.kernel_calls(rt.inputs())
    assert isinstance(saved, tuple) and len(saved) == 1 and saved[0].shape == (4, 2, 6, 10)
    assert grad_output.shape == (4, 2, 3, 5)


def maxpool_backward(saved, grad_output):
    """Routes each output gradient to the first maximum of its 2x2 window (the arguments mnist_pool passes)."""
    (x,) = saved
    _, idx = F.max_pool2d(x, 2, return_indices=True)
    return F.max_unpool2d(grad_output, idx, 2, output_size=x.shape[-2:])


def test_pool_backward_with_saved_tensors_tuple():
    t = load_task(RKB / "pool")
    rt = runtime_for(t, "backward")
    for config in t.configs:
        rt.setup(config, config.seed, "cpu")
        ref = rt.reference(rt.inputs())
        assert len(ref) == 1 and ref[0].shape == rt.pristine()[0].shape  # no parameters: grad of x only
        assert close(rt.candidate(types.SimpleNamespace(backward=maxpool_backward), rt.inputs()), ref,
                     t.spec("backward").tolerance)
        wrong = types.SimpleNamespace(backward=lambda s, g: torch.zeros_like(s[0]))
        assert not close(rt.candidate(wrong, rt.inputs()), ref, t.spec("backward").tolerance)


def eval_mode_bn(x, weight, bias, mean, var, training, momentum, eps):
    """What the reference computes after an invented .eval(): running statistics (0 and 1 here)."""
    shape = (1, -1, 1, 1)
    return (x - mean.view(shape)) / torch.sqrt(var.view(shape) + eps) * weight.view(shape) + bias.view(shape)


def test_batchnorm_reference_runs_in_training_mode():
    """Upstream never calls eval(): a BatchNorm reference normalises with batch statistics. Under eval() it would
    be nearly the identity here (running mean 0, variance 1) and a kernel returning its input would pass."""
    t = load_task(RKB / "batchnorm")
    rt = runtime_for(t, "forward")
    tol = t.spec("forward").tolerance
    identity = types.SimpleNamespace(forward=lambda x, *rest: x.clone())
    stale = types.SimpleNamespace(forward=eval_mode_bn)
    correct = types.SimpleNamespace(forward=lambda x, w, b, m, v, tr, mo, e: F.batch_norm(
        x, m.clone(), v.clone(), w, b, tr, mo, e))
    for config in t.configs:
        rt.setup(config, config.seed, "cpu")
        assert rt._model.training
        ref = rt.reference(rt.inputs())
        assert abs(ref[0].mean().item()) < 1e-4 and abs(ref[0].std().item() - 1) < 0.05
        assert close(rt.candidate(correct, rt.inputs()), ref, tol)
        assert not close(rt.candidate(identity, rt.inputs()), ref, tol)
        assert not close(rt.candidate(stale, rt.inputs()), ref, tol)
        # the trap kbench used to fall into: the eval-mode reference would accept the identity
        rt._model.eval()
        assert close(rt.candidate(identity, rt.inputs()), rt.reference(rt.inputs()), tol)


def test_a_candidate_writing_into_a_weight_cannot_steer_the_reference():
    task = load_task(RKB_TASK)
    rt = runtime_for(task, "forward")
    rt.setup(task.configs[0], 0, "cpu")
    want = rt.reference(rt.inputs())

    def vandal(x, weight, bias):
        weight.zero_()
        bias.zero_()
        return torch.zeros(x.shape[0], weight.shape[0])

    got = rt.candidate(types.SimpleNamespace(forward=vandal), rt.inputs())
    assert not close(got, want, task.spec("forward").tolerance)
    assert all(torch.equal(a, b) for a, b in zip(rt.reference(rt.inputs()), want))


def test_backward_timing_callables():
    task = load_task(RKB_TASK)
    rt = runtime_for(task, "backward")
    tol = task.spec("backward").tolerance
    config = task.configs[0]
    rt.setup(config, config.seed, "cpu")
    ref = rt.reference(rt.inputs())
    # eager: one backpropagation of the fixed grad_output through autograd of forward_fn, graph built once
    eager = rt.eager_callable()
    assert close(tuple(eager()), ref, tol) and close(tuple(eager()), ref, tol)
    calls = []
    spy = types.SimpleNamespace(backward=lambda *a: calls.append(a) or bwd_correct(*a))
    run = rt.candidate_callable(spy)
    assert close(tuple(run()), ref, tol) and close(tuple(run()), ref, tol)
    assert len(calls) == 2 and rt.reference_module.AutogradFunction.__dict__["backward_fn"] is None


def test_forward_timing_callables():
    task = load_task(RKB_TASK)
    rt = runtime_for(task, "forward")
    rt.setup(task.configs[0], 0, "cpu")
    ref = rt.reference(rt.inputs())[0]
    assert torch.equal(rt.eager_callable()(), ref)
    assert torch.allclose(rt.candidate_callable(GOOD)(), ref, atol=1e-5)


def test_backward_swap_is_restored_after_an_error():
    task = load_task(RKB_TASK)
    rt = runtime_for(task, "backward")
    rt.setup(task.configs[0], 0, "cpu")
    cls = rt.reference_module.AutogradFunction

    def broken(*args):
        raise RuntimeError("kernel exploded")

    with pytest.raises(RuntimeError, match="kernel exploded"):
        rt.candidate(types.SimpleNamespace(backward=broken), rt.inputs())
    assert cls.__dict__["backward_fn"] is None
    with pytest.raises((RuntimeError, ValueError), match="not enough values|expected|returned"):
        rt.candidate(types.SimpleNamespace(backward=lambda g, x, w: (g @ w,)), rt.inputs())
    assert cls.__dict__["backward_fn"] is None


def test_backward_candidate_that_is_never_called_is_an_error(rkb: Path):
    # Model.forward ignores fn: the reference gradients would come back for any candidate.
    edit(rkb / "func_backward.py", "return fn(x, self.weight, self.bias)", "return forward_fn(x, self.weight, self.bias)")
    task = load_task(rkb)
    rt = runtime_for(task, "backward")
    rt.setup(task.configs[0], 0, "cpu")
    with pytest.raises(RuntimeError, match="never called"):
        rt.candidate(GOOD, rt.inputs())


def test_robust_kbench_setup_is_seeded():
    task = load_task(RKB_TASK)
    rt = runtime_for(task, "forward")
    config = task.configs[0]
    rt.setup(config, 3, "cpu")
    first, weight = rt.inputs()[0], rt._model.weight.detach().clone()
    rt.setup(config, 3, "cpu")
    assert torch.equal(first, rt.inputs()[0]) and torch.equal(weight, rt._model.weight)
    rt.setup(config, 4, "cpu")
    assert not torch.equal(first, rt.inputs()[0])


# --- KernelBench loading --------------------------------------------------------------------------------


def test_kernelbench_fixtures_load():
    t = load_task(KB / "matmul_relu.py")
    assert t.format == "kernelbench" and t.name == "matmul_relu" and t.dtype == "float32"
    assert t.root == (KB / "matmul_relu.py").resolve() and t.baseline_dir("forward") is None
    assert list(t.directions) == ["forward"]
    spec = t.spec("forward")
    assert spec.signature == "forward(x: torch.Tensor) -> torch.Tensor"
    assert spec.tolerance == Tolerance(1e-4, 1e-4)  # KernelBench's fp32 tolerance
    assert spec.reference_path == (KB / "matmul_relu.py").resolve()
    # three seeds of the problem's own get_inputs, never an invented distribution ...
    assert [(c.name, c.seed, c.init, c.input_kwargs) for c in t.configs[:3]] == [
        ("seed0", 0, "normal", {}), ("seed1", 1, "normal", {}), ("seed2", 2, "normal", {})]
    # ... and kbench's odd-size addition: batch_size is read by get_inputs only (in_features by both)
    odd = t.configs[3]
    assert (odd.name, odd.input_kwargs, odd.tags) == ("odd-sizes", {"batch_size": 35}, ("kbench-addition",))
    assert any("odd-sizes is kbench's addition" in n for n in t.notes)
    assert t.description.startswith("A linear layer followed by ReLU")
    s = load_kernelbench(KB / "scaled_swish.py")
    assert [c.name for c in s.configs] == ["seed0", "seed1", "seed2"]  # a tuple shape: no variant
    assert Task.from_json(json.loads(json.dumps(s.to_json()))) == s


@pytest.mark.parametrize("suffix, dtype, tol", [("@fp16", "float16", 1e-2), ("@bf16", "bfloat16", 1e-2),
                                                ("", "float32", 1e-4)])
def test_kernelbench_precision(suffix: str, dtype: str, tol: float):
    t = load_task(f"{KB / 'scaled_swish.py'}{suffix}")
    assert t.dtype == dtype and t.spec("forward").tolerance == Tolerance(tol, tol)
    assert t.name == "scaled_swish" + (f"-{suffix[1:]}" if suffix else "")
    rt = runtime_for(t, "forward")
    rt.setup(t.configs[0], 0, "cpu")
    (x,) = rt.inputs()
    assert x.dtype == getattr(torch, dtype) and rt.reference([x])[0].dtype == getattr(torch, dtype)


def test_cast_floats_leaves_integer_tensors():
    ints, floats = torch.arange(3), torch.ones(2)
    out = cast_floats([ints, floats, 1.5], torch.bfloat16)
    assert out[0] is ints and out[1].dtype == torch.bfloat16 and out[2] == 1.5


@pytest.mark.parametrize("problem, check", [
    ("log_positive.py", lambda xs, out: bool((xs[0] > 0).all()) and bool(torch.isfinite(out[0]).all())),
    ("hinge_targets.py", lambda xs, out: set(xs[1].unique().tolist()) <= {-1.0, 1.0}),
    ("symmetric_matmul.py", lambda xs, out: all(torch.equal(a, a.T) for a in xs)),
])
def test_kernelbench_preconditions_hold_on_every_config(problem: str, check):
    """The problem's own get_inputs builds its inputs (positive for a log, +-1 targets, symmetric matrices);
    kbench once replaced them with uniform / offset draws and broke all three."""
    t = load_task(KB / problem)
    rt = runtime_for(t, "forward")
    for config in t.configs:
        rt.setup(config, config.seed, "cpu")
        xs = rt.inputs()
        assert check(xs, rt.reference(xs)), (problem, config.name)


def test_kernelbench_size_variant_only_where_the_structure_allows():
    sym = load_task(KB / "symmetric_matmul.py")
    odd = next(c for c in sym.configs if c.name == "odd-sizes")
    assert odd.input_kwargs == {"N": 63}
    rt = runtime_for(sym, "forward")
    rt.setup(odd, odd.seed, "cpu")
    assert rt.inputs()[0].shape == (63, 63)
    assert import_file(KB / "symmetric_matmul.py", "kbench_test_sym").N == 64
    rt.setup(sym.configs[0], 0, "cpu")
    assert rt.inputs()[0].shape == (64, 64)  # the constant is put back after get_inputs
    # Model.view(-1, 48) fixes the spatial size: no variant at all
    assert [c.name for c in load_task(KB / "fixed_view.py").configs] == ["seed0", "seed1", "seed2"]
    assert size_variant(pysource.parse_module(KB / "log_positive.py")) == {"rows": 31, "cols": 249}


def test_kernelbench_missing_package_is_named(tmp_path: Path):
    with pytest.raises(TaskError, match="imports kbench_fixture_not_installed_pkg, which is not installed here; "
                                        "`pip install kbench_fixture_not_installed_pkg`") as info:
        load_task(KB / "needs_package.py")
    assert str(KB / "needs_package.py") in str(info.value)
    # an installed third-party package is noted, with the Hugging Face cache when from_pretrained is used
    path = tmp_path / "hf.py"
    path.write_text((KB / "needs_package.py").read_text().replace("kbench_fixture_not_installed_pkg", "pytest")
                    + "\nweights = 'x'.from_pretrained if False else None\n")
    notes = load_task(path).notes
    assert any("needs the packages pytest" in n for n in notes)
    assert any("Hugging Face cache" in n for n in notes)


@pytest.mark.parametrize("change, message", [
    (("def get_init_inputs():", "def init_inputs():"), "no top-level function `get_init_inputs\\(\\)`"),
    (("def get_inputs():", "def get_inputs(batch):"), "`get_inputs` must be callable with no arguments"),
    (("class Model(nn.Module):", "class Network(nn.Module):"), "no top-level class `Model`"),
    (("def forward(self, x: torch.Tensor)", "def __call__(self, x: torch.Tensor)"), "Model has no `forward`"),
    (("def get_inputs():", "def get_inputs(:"), r":\d+: Python syntax error"),
])
def test_kernelbench_errors_name_the_file(tmp_path: Path, change, message: str):
    path = tmp_path / "problem.py"
    shutil.copy(KB / "matmul_relu.py", path)
    edit(path, *change)
    with pytest.raises(TaskError, match=message) as info:
        load_task(path)
    assert str(path) in str(info.value)


def test_kernelbench_defaults_are_fine(tmp_path: Path):
    path = tmp_path / "p.py"
    shutil.copy(KB / "matmul_relu.py", path)
    edit(path, "def get_inputs():", "def get_inputs(batch=4, *, scale=1.0):")
    assert load_kernelbench(path).name == "p"


# --- candidates -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, entry", [
    ("linear_forward_correct.cu", "forward"), ("linear_forward_wrong.cu", "forward"),
    ("linear_backward_correct.cu", "backward"), ("linear_backward_wrong.cu", "backward"),
])
def test_robust_kbench_candidate_detection(name: str, entry: str):
    c = load_candidate(RKB_CANDIDATES / name)
    assert c.format == "robust-kbench" and c.main_file == name
    text = c.files[name]
    assert "#include <torch/extension.h>" in text and f'm.def("{entry}"' in text


def test_a_robust_kbench_kernel_named_kernel_cu(tmp_path: Path):
    """robust-kbench publishes its kernels as `<task>/<direction>/kernel.cu`: one .cu with PYBIND11_MODULE."""
    folder = tmp_path / "highlighted" / "linear" / "forward"
    folder.mkdir(parents=True)
    shutil.copy(RKB_CANDIDATES / "linear_forward_correct.cu", folder / "kernel.cu")
    for path in (folder / "kernel.cu", folder):
        c = load_candidate(path)
        assert c.format == "robust-kbench" and list(c.files) == ["kernel.cu"], path
    (folder / "binding.cpp").write_text("// native glue")
    assert load_candidate(folder / "kernel.cu").format == "native"  # with a binding.cpp it is the native pair
    (folder / "binding.cpp").unlink()
    (folder / "kernel.cu").write_text("__global__ void k() {}\n")  # no PYBIND11_MODULE: not a candidate
    with pytest.raises(Exception, match="needs kernel.cu and binding.cpp"):
        load_candidate(folder)


@pytest.mark.parametrize("name", ["matmul_relu_correct.py", "matmul_relu_wrong.py", "scaled_swish_correct.py"])
def test_kernelbench_candidate_detection_and_class(name: str):
    c = load_candidate(KB_CANDIDATES / name)
    assert c.format == "kernelbench"
    # Found with ast: importing the file would build its CUDA extension.
    module = pysource.parse_module(KB_CANDIDATES / name)
    assert find_class(module, "ModelNew") is not None
    assert "load_inline" in c.files[name]
    problem = KB / (name.rsplit("_", 1)[0] + ".py")
    init_inputs = import_file(problem, f"kbench_test_problem_{problem.stem}").get_init_inputs()
    assert len(pysource.class_init_params(module, "ModelNew", KB_CANDIDATES / name).names) == len(init_inputs)


# --- KernelBench runtime on CPU -------------------------------------------------------------------------


class NewCorrect(torch.nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.clamp_min(torch.addmm(self.linear.bias, x, self.linear.weight.t()), 0)


class NewReseeded(NewCorrect):
    """Draws extra random numbers first: its own init differs, so only the loaded state_dict makes it right."""

    def __init__(self, in_features, out_features):
        torch.randn(1000)
        super().__init__(in_features, out_features)
        self.scratch = torch.nn.Parameter(torch.zeros(3))  # a key the reference lacks: left as is


class NewWrong(NewCorrect):
    def forward(self, x):  # mirrors matmul_relu_wrong.py: ReLU before the bias
        return torch.clamp_min(x @ self.linear.weight.t(), 0) + self.linear.bias


def test_kernelbench_runtime_matmul_relu():
    task = load_task(KB / "matmul_relu.py")
    rt = runtime_for(task, "forward")
    tol = task.spec("forward").tolerance
    good = types.SimpleNamespace(ModelNew=NewCorrect)
    reseeded = types.SimpleNamespace(ModelNew=NewReseeded)
    bad = types.SimpleNamespace(ModelNew=NewWrong)
    for config in task.configs:
        rt.setup(config, config.seed, "cpu")
        assert rt._model.training  # as KernelBench runs it
        ref = rt.reference(rt.inputs())
        assert ref[0].shape == (config.input_kwargs.get("batch_size", 37), 129)
        assert close(rt.candidate(good, rt.inputs()), ref, tol)
        assert close(rt.candidate(reseeded, rt.inputs()), ref, tol)
        assert not close(rt.candidate(bad, rt.inputs()), ref, tol)


def test_kernelbench_candidate_model_is_cached_per_setup():
    task = load_task(KB / "matmul_relu.py")
    rt = runtime_for(task, "forward")
    good = types.SimpleNamespace(ModelNew=NewCorrect)
    rt.setup(task.configs[0], 0, "cpu")
    first = rt.candidate_model(good)
    assert rt.candidate_model(good) is first
    assert rt.candidate_callable(good)()[0].shape == (37, 129)
    rt.setup(task.configs[1], 1, "cpu")
    assert rt.candidate_model(good) is not first
    with pytest.raises(AttributeError, match="ModelNew"):
        rt.candidate(types.SimpleNamespace(), rt.inputs())


def test_kernelbench_runtime_elementwise():
    task = load_task(KB / "scaled_swish.py")
    rt = runtime_for(task, "forward")
    tol = task.spec("forward").tolerance

    class Swish(torch.nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale

        def forward(self, x):
            return self.scale * x / (1 + torch.exp(-x))

    class Unscaled(Swish):
        def forward(self, x):
            return x * torch.sigmoid(x)

    for config in task.configs:
        rt.setup(config, config.seed, "cpu")
        ref = rt.reference(rt.inputs())
        assert close(rt.candidate(types.SimpleNamespace(ModelNew=Swish), rt.inputs()), ref, tol)
        assert not close(rt.candidate(types.SimpleNamespace(ModelNew=Unscaled), rt.inputs()), ref, tol)


def test_prompts_state_robust_kbenchs_backward_convention():
    """An LLM writing a robust-kbench backward must be told upstream's convention, not kbench's generic one."""
    from engine.llm.render import context_values

    rkb = context_values(load_task(RKB_TASK), "backward")["backward_contract"]
    assert "AutogradFunction.backward_fn" in rkb and "fn=AutogradFunction.apply" in rkb
    native = context_values(load_task("softmax"), "backward")["backward_contract"]
    assert "candidate.backward(grad_output, *fn_args)" in native


def test_size_variant_leaves_a_size_written_twice(tmp_path: Path):
    """KernelBench's HingeLoss broadcasts [batch_size, *input_shape] against [batch_size] and only works because
    batch_size == input_shape[0]: a constant whose value appears elsewhere in the file is not varied."""
    path = tmp_path / "hinge.py"
    path.write_text((KB / "hinge_targets.py").read_text().replace(
        "batch_size = 96\n", "batch_size = 96\ninput_shape = (96,)\nrows = 40\n").replace(
        "torch.randn(batch_size, 1)", "torch.randn(batch_size, *input_shape) + rows"))
    assert size_variant(pysource.parse_module(path)) == {"rows": 39}
