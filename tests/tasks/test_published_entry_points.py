"""robust-kbench's published kernels (highlighted/<task>/<direction>/kernel.cu of SakanaAI/robust-kbench) take the
arguments kbench's judge passes on the built-in robust-kbench tasks, in every direction it publishes.

The fixture tests/fixtures/robust_kbench_entry_points/entry_points.cpp declares each published entry point's C++
parameter list (types, order, pybind argument names) with no body; it is built here as a CPU extension, and each
stand-in is called exactly as the runner calls a candidate: with the judge's call plan for a config of the built-in
task, sent through the wire's argument encoding. A TypeError ("incompatible function arguments") is what a GPU run
of the published kernel would raise. The GPU test runs the published kernels themselves
(tests/pipeline/test_gpu_published.py).
"""

from __future__ import annotations

import pytest
import torch

from engine.harness.runtimes import runtime_for
from engine.pipeline.protocol import wire
from engine.tasks.loader import builtin_task_names, load_task
from tests.paths import FIXTURES

pytestmark = pytest.mark.slow

ENTRY_POINTS = FIXTURES / "robust_kbench_entry_points" / "entry_points.cpp"
# Every kernel robust-kbench publishes, by task and direction.
PUBLISHED = [("layernorm", "forward"), ("llama_ffw", "forward"), ("llama_rmsnorm", "forward"),
             ("mnist_conv_relu_pool", "forward"), ("mnist_cross_entropy", "forward"),
             ("mnist_cross_entropy", "backward"), ("mnist_linear", "forward"), ("mnist_linear", "backward"),
             ("mnist_linear_relu", "forward"), ("mnist_linear_relu", "backward"), ("mnist_pool", "backward"),
             ("resnet_block", "forward")]
# Kernels of robust-kbench's own task folders (tasks/<task>/<direction>.cu) in a direction it publishes no
# highlighted kernel for, whose calling convention the built-in task takes as well.
FOLDER_KERNELS = [("layernorm", "backward")]


@pytest.fixture(scope="module")
def entry_points(tmp_path_factory):
    from torch.utils.cpp_extension import load   # lazy: builds with the toolchain only when this module runs
    build = tmp_path_factory.mktemp("entry_points")
    return load(name="kbench_rkb_entry_points", sources=[str(ENTRY_POINTS)], build_directory=str(build),
                verbose=False)


def _smallest(task):
    def size(c):
        return sum(v for v in {**c.model_kwargs, **c.input_kwargs}.values() if isinstance(v, int))
    return min(task.configs, key=size)


def _runner_args(task, direction):
    """The arguments the runner calls the candidate's entry point with, for the task's smallest config (CPU)."""
    rt = runtime_for(task, direction)
    rt.setup(_smallest(task), 7, "cpu")
    plan = rt.call_plan(rt.inputs())
    tensors: list = []
    tree = wire.encode_args(plan.args, tensors)
    return plan.entry, wire.decode_args(tree, [t.clone() for t in tensors])


def test_every_published_direction_is_a_builtin_robust_kbench_direction():
    builtin = {n for n in builtin_task_names() if "robust-kbench" in load_task(n).tags}
    for name, direction in PUBLISHED:
        assert name in builtin and direction in load_task(name).directions, (name, direction)


@pytest.mark.parametrize("name, direction", PUBLISHED, ids=lambda x: str(x))
def test_published_entry_point_takes_what_the_judge_passes(entry_points, name, direction):
    entry, args = _runner_args(load_task(name), direction)
    assert entry == direction
    fn = getattr(entry_points, f"{name}__{direction}")
    with torch.no_grad():
        fn(*args)        # a TypeError here is the GPU run's `incompatible function arguments`


@pytest.mark.parametrize("name, direction", FOLDER_KERNELS, ids=lambda x: str(x))
def test_upstream_folder_kernel_takes_what_the_judge_passes(entry_points, name, direction):
    entry, args = _runner_args(load_task(name), direction)
    assert entry == direction
    with torch.no_grad():
        getattr(entry_points, f"{name}__{direction}")(*args)


def test_layernorm_baseline_binding_takes_upstreams_call(toolchain, native_cache_root):
    """kbench's layernorm backward baseline, built with nvcc through kbench's build, accepts the call robust-kbench's
    harness makes (grad_output, x, weight, bias, eps, normalized_shape as a Python tuple) and the judge's call plan:
    on CPU tensors its own CUDA check stops it, not pybind's argument matching."""
    from engine.harness.build.stage import build_candidate, load_module
    from engine.tasks.glue.generated import load_for_task
    task = load_task("layernorm")
    res = build_candidate(load_for_task(task.baseline_dir("backward"), task, "backward"), native_cache_root,
                          toolchain)
    assert res.ok, res.error
    mod = load_module(res)
    g, x = torch.randn(2, 3, 5, 7), torch.randn(2, 3, 5, 7)
    w, b = torch.randn(3, 5, 7), torch.randn(3, 5, 7)
    for shape in ((3, 5, 7), [3, 5, 7]):
        with pytest.raises(RuntimeError, match="tensors must be on CUDA"):
            mod.backward(g, x, w, b, 1e-5, shape)
    _, args = _runner_args(task, "backward")
    with pytest.raises(RuntimeError, match="tensors must be on CUDA"):
        mod.backward(*args)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        mod.backward(g, x, w, b, 1e-5)           # kbench's generic call, without normalized_shape


@pytest.mark.parametrize("name", ["mnist_linear", "mnist_pool", "mnist_conv_relu_pool", "unet_linear"])
def test_builtin_backward_passes_upstreams_arguments(name):
    """The built-in task's backward gets robust-kbench's arguments, in its order: upstream's func_backward.py passes
    (grad_output, x, weights) for the linear layers, (ctx.saved_tensors, grad_output) for the max-pool and
    (x, weights, biases, grad_output) for the conv block."""
    _, args = _runner_args(load_task(name), "backward")
    shapes = [tuple(tuple(t.shape) for t in a) if isinstance(a, tuple) else tuple(a.shape) for a in args]
    task = load_task(name)
    cfg = _smallest(task)
    kw = {**cfg.model_kwargs, **cfg.input_kwargs}
    if name in ("mnist_linear", "unet_linear"):
        assert len(args) == 3 and shapes[2] == (kw["num_output_features"], kw["num_input_features"])
        assert shapes[0][-1] == kw["num_output_features"] and shapes[1][-1] == kw["num_input_features"]
    elif name == "mnist_pool":
        b, c, h, w = kw["batch_size"], kw["in_channels"], kw["height"], kw["width"]
        assert isinstance(args[0], tuple) and shapes == [((b, c, h, w),), (b, c, h // 2, w // 2)]
    else:
        assert len(args) == 4 and shapes[0][0] == kw["batch_size"] and len(shapes[1]) == 4 and len(shapes[2]) == 1
        assert shapes[3][0] == kw["batch_size"] and shapes[3][1] == shapes[1][0]
