"""Where a setup draws: the task's own Model and get_inputs under `torch.device(device)` on CUDA (base.on_device),
again on the CPU where the task's code cannot run there, the init schemes and grad_outputs from a generator on
the tensor's device, and every draw deterministic per seed.

The CUDA path runs here on the CPU by making `base.draw_device` name another device: `torch.device("cpu")` (the
context path, same values as the plain one) or `torch.device("meta")`, where a task's `.numpy()` raises as it does
on a CUDA tensor, so the CPU fallback runs. The `gpu` tests at the end check the real thing on a GPU.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import torch

from engine.harness.runtimes import base, runtime_for
from engine.harness.runtimes.native import NativeRuntime
from engine.tasks.inits import apply_init
from engine.tasks.loader import builtin_tasks_dir, load_task
from tests.paths import FIXTURES

RKB_TASK = FIXTURES / "robust_kbench" / "linear"
KB = FIXTURES / "kernelbench"

# -- tasks ------------------------------------------------------------------------------------------

_TOML = textwrap.dedent("""
    name = "{name}"
    dtype = "float32"
    directions = ["forward", "backward"]

    [forward]
    signature = "forward(x: f32[B,N], scale: f32[N]) -> y: f32[B,N]"
    atol = 1e-5
    rtol = 1e-5
    flops = "batch * hidden"
    bytes = "dtype_bytes * (2 * batch * hidden + hidden)"

    [backward]
    signature = "backward(grad_y: f32[B,N], x, scale) -> (grad_x: f32[B,N], grad_scale: f32[N])"
    atol = 1e-5
    rtol = 1e-5

    [[configs]]
    name = "small"
    args = {{ batch = 3, hidden = 37 }}
    seed = 0
    init = "normal"

    [[configs]]
    name = "wide"
    args = {{ batch = 5, hidden = 65 }}
    seed = 1
    init = "wide"

    [[configs]]
    name = "sparse"
    args = {{ batch = 7, hidden = 33 }}
    seed = 2
    init = "sparse"
""")

# Plain torch: draws wherever torch.device(...) says.
_TORCH_REF = textwrap.dedent("""
    import torch
    import torch.nn as nn

    CALLS = []   # (what, the default device while it ran)

    def forward_fn(x, scale):
        return x * scale

    class Model(nn.Module):
        def __init__(self, hidden):
            super().__init__()
            CALLS.append(("Model", torch.empty(()).device))
            self.scale = nn.Parameter(torch.randn(hidden))

        def forward(self, x, fn=forward_fn):
            return fn(x, self.scale)

    def get_inputs(batch, hidden):
        CALLS.append(("get_inputs", torch.empty(()).device))
        return [torch.randn(batch, hidden)]
""")

# Through numpy, as some tasks are: `.numpy()` of a CUDA (or meta) tensor raises, so these need the CPU.
_NUMPY_REF = textwrap.dedent("""
    import numpy as np
    import torch
    import torch.nn as nn

    CALLS = []

    def forward_fn(x, scale):
        return x * scale

    class Model(nn.Module):
        def __init__(self, hidden):
            super().__init__()
            CALLS.append(("Model", torch.empty(()).device))
            self.scale = nn.Parameter(torch.from_numpy(np.tanh(torch.randn(hidden).numpy()) + 1.0))

        def forward(self, x, fn=forward_fn):
            return fn(x, self.scale)

    def get_inputs(batch, hidden):
        CALLS.append(("get_inputs", torch.empty(()).device))
        x = torch.randn(batch, hidden).numpy()
        return [torch.from_numpy(np.sort(x, axis=-1).copy())]
""")

_KB_NUMPY = textwrap.dedent("""
    import numpy as np
    import torch
    import torch.nn as nn

    CALLS = []

    class Model(nn.Module):
        def __init__(self, in_features, out_features):
            super().__init__()
            CALLS.append(("Model", torch.empty(()).device))
            self.linear = nn.Linear(in_features, out_features)

        def forward(self, x):
            return torch.relu(self.linear(x))

    batch_size = 13
    in_features = 40
    out_features = 9

    def get_inputs():
        CALLS.append(("get_inputs", torch.empty(()).device))
        return [torch.from_numpy(np.cumsum(torch.randn(batch_size, in_features).numpy(), axis=-1))]

    def get_init_inputs():
        return [in_features, out_features]
""")


def _native_task(root: Path, ref: str):
    root.mkdir(parents=True)
    (root / "reference.py").write_text(ref)
    (root / "task.toml").write_text(_TOML.format(name=root.name))
    return load_task(root)


def _rkb_numpy_task(tmp_path: Path):
    """The robust-kbench linear fixture with a forward Model and get_inputs that go through numpy."""
    root = Path(shutil.copytree(RKB_TASK, tmp_path / "linear_np"))
    path = root / "func_forward.py"
    text = path.read_text()
    for old, new in [("    return [torch.randn(batch_size, in_features)]",
                      "    return [torch.from_numpy(np.abs(torch.randn(batch_size, in_features).numpy()))]"),
                     ("self.bias = nn.Parameter(0.5 * torch.randn(out_features))",
                      "self.bias = nn.Parameter(torch.from_numpy(0.5 * torch.randn(out_features).numpy()))")]:
        assert old in text, f"fixture changed: {old!r}"
        text = text.replace(old, new)
    path.write_text("import numpy as np\n" + text)
    return load_task(root)


@pytest.fixture
def context_on(monkeypatch):
    """Make on_device (and seeded_normals) use `torch.device(dev)` for every setup, as they do for CUDA."""
    def use(dev: str) -> None:
        monkeypatch.setattr(base, "draw_device", lambda device: torch.device(dev))
    return use


def _tensors(rt) -> list:
    return [t.detach().clone() for t in rt.pristine() if isinstance(t, torch.Tensor)]


def _params(rt) -> list:
    model = getattr(rt, "model", None) or getattr(rt, "_model", None)
    return [p.detach().clone() for p in model.parameters()]


def _equal(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


def _runtimes(tmp_path: Path):
    """(runtime, config) for each format, forward."""
    native = _native_task(tmp_path / "scale", _TORCH_REF)
    rkb = load_task(RKB_TASK)
    kb = load_task(KB / "matmul_relu.py")
    return [(NativeRuntime(native, "forward"), native.configs[1]),
            (runtime_for(rkb, "forward"), rkb.configs[0]),
            (runtime_for(kb, "forward"), kb.configs[0])]


# -- determinism ------------------------------------------------------------------------------------

@pytest.mark.parametrize("context", [None, "cpu"], ids=["plain", "device-context"])
def test_same_seed_same_tensors_other_seed_other_tensors(tmp_path, context_on, context):
    if context:
        context_on(context)
    for rt, cfg in _runtimes(tmp_path):
        rt.setup(cfg, 5, "cpu")
        x, w = _tensors(rt), _params(rt)
        rt.setup(cfg, 5, "cpu")
        assert _equal(x, _tensors(rt)) and _equal(w, _params(rt)), type(rt).__name__
        rt.setup(cfg, 6, "cpu")
        assert not _equal(x, _tensors(rt)) and not _equal(w, _params(rt)), type(rt).__name__


def test_the_device_context_path_draws_what_the_plain_path_draws_on_the_cpu(tmp_path, monkeypatch):
    """The context changes where factory calls allocate, nothing else: with it naming the CPU, the same values."""
    plain = {}
    for rt, cfg in _runtimes(tmp_path / "a"):
        rt.setup(cfg, 9, "cpu")
        plain[type(rt).__name__] = (_tensors(rt), _params(rt))
    monkeypatch.setattr(base, "draw_device", lambda device: torch.device("cpu"))
    for rt, cfg in _runtimes(tmp_path / "b"):
        rt.setup(cfg, 9, "cpu")
        x, w = plain[type(rt).__name__]
        assert _equal(x, _tensors(rt)) and _equal(w, _params(rt)), type(rt).__name__


def test_kernelbench_reseed_inputs_is_seeded_and_keeps_the_model(context_on):
    context_on("cpu")
    kb = load_task(KB / "matmul_relu.py")
    rt = runtime_for(kb, "forward")
    cfg = kb.configs[0]
    rt.setup(cfg, 3, "cpu")
    w = _params(rt)
    rt.reseed_inputs(cfg, 4, "cpu")
    x4 = _tensors(rt)
    rt.reseed_inputs(cfg, 4, "cpu")
    assert _equal(x4, _tensors(rt)) and _equal(w, _params(rt))
    rt.setup(cfg, 4, "cpu")          # setup(4) draws its inputs under seed 4 + 1, as reseed_inputs(4) does
    assert _equal(x4, _tensors(rt))
    rt.reseed_inputs(cfg, 7, "cpu")
    assert not _equal(x4, _tensors(rt))


@pytest.mark.parametrize("fmt", ["native", "robust-kbench"])
def test_grad_outputs_are_seeded(tmp_path, context_on, fmt):
    context_on("cpu")
    if fmt == "native":
        task = _native_task(tmp_path / "scale", _TORCH_REF)
        rt, cfg = NativeRuntime(task, "backward"), task.configs[0]
        grads = lambda: [rt.grad_out.clone()]  # noqa: E731
    else:
        task = load_task(RKB_TASK)
        rt, cfg = runtime_for(task, "backward"), task.configs[0]
        grads = lambda: [g.clone() for g in rt._grad_outputs]  # noqa: E731
    rt.setup(cfg, 11, "cpu")
    g = grads()
    assert g and all(t.device.type == "cpu" for t in g)
    rt.setup(cfg, 11, "cpu")
    assert _equal(g, grads())
    rt.setup(cfg, 12, "cpu")
    assert not _equal(g, grads())


def test_cpu_setup_is_what_it_always_was(tmp_path):
    """On the CPU a native setup is the documented recipe: seed, Model; seed + 1, get_inputs; the init scheme;
    grad_out from a CPU generator seeded with seed + 2."""
    task = _native_task(tmp_path / "scale", _TORCH_REF)
    cfg = task.configs[1]   # init "wide"
    rt = NativeRuntime(task, "backward")
    rt.setup(cfg, 21, "cpu")
    torch.manual_seed(21)
    model = rt.ref.Model(**cfg.model_kwargs)
    torch.manual_seed(22)
    inputs = apply_init(list(rt.ref.get_inputs(**cfg.input_kwargs)), cfg.init, 21)
    assert _equal(_params(rt), [p.detach() for p in model.parameters()])
    assert _equal(_tensors(rt), inputs)
    out_shape = (cfg.input_kwargs["batch"], cfg.input_kwargs["hidden"])
    grad = torch.randn(out_shape, generator=torch.Generator(device="cpu").manual_seed(23))
    assert torch.equal(rt.grad_out, grad)


# -- the device context and the fallback -------------------------------------------------------------

def test_setup_runs_the_tasks_code_under_the_device_context(tmp_path, context_on):
    context_on("meta")
    task = _native_task(tmp_path / "scale", _TORCH_REF)
    rt = NativeRuntime(task, "forward")
    rt.ref.CALLS.clear()
    rt.setup(task.configs[0], 0, "meta")
    assert rt.ref.CALLS == [("Model", torch.device("meta")), ("get_inputs", torch.device("meta"))]
    assert rt.pristine()[0].device.type == "meta" and rt.pristine()[0].shape == (3, 37)


def test_no_device_context_off_cuda():
    assert base.draw_device("cpu") is None and base.draw_device(torch.device("meta")) is None
    assert base.draw_device("cuda") == torch.device("cuda")
    assert base.draw_device(torch.device("cuda", 1)) == torch.device("cuda", 1)
    calls = []
    assert base.on_device("cpu", lambda: calls.append(torch.empty(()).device) or 7) == 7
    assert calls == [torch.device("cpu")]


def test_a_step_that_raises_under_the_context_runs_again_without_it(context_on):
    context_on("meta")
    seen = []

    def step():
        torch.manual_seed(3)
        x = torch.randn(4)
        seen.append(x.device.type)
        return torch.from_numpy(x.numpy() * 2)   # raises for a meta tensor, as for a CUDA one

    out = base.on_device("cpu", step)
    assert seen == ["meta", "cpu"]
    torch.manual_seed(3)
    assert torch.equal(out, torch.randn(4) * 2)


def test_an_error_of_the_tasks_own_still_raises(context_on):
    context_on("meta")
    calls = []

    def step():
        calls.append(1)
        raise ValueError("the task's own bug")

    with pytest.raises(ValueError, match="own bug"):
        base.on_device("cpu", step)
    assert len(calls) == 2   # once under the context, once on the CPU, whose error is the one raised


@pytest.mark.parametrize("config", [0, 1, 2])
def test_native_numpy_task_falls_back_to_the_cpu(tmp_path, context_on, config):
    """A task whose Model and get_inputs go through numpy cannot run under the device context: both are built
    again on the CPU under the same seeds, so the setup is the one a plain CPU setup makes."""
    task = _native_task(tmp_path / "np", _NUMPY_REF)
    cfg = task.configs[config]
    plain = NativeRuntime(task, "forward")
    plain.setup(cfg, 4, "cpu")
    context_on("meta")
    rt = NativeRuntime(task, "forward")
    rt.ref.CALLS.clear()
    rt.setup(cfg, 4, "cpu")
    assert [what for what, _ in rt.ref.CALLS] == ["Model", "Model", "get_inputs", "get_inputs"]
    assert [dev.type for _, dev in rt.ref.CALLS] == ["meta", "cpu", "meta", "cpu"]
    assert _equal(_tensors(rt), _tensors(plain)) and _equal(_params(rt), _params(plain))
    assert torch.equal(rt.reference(rt.inputs())[0], plain.reference(plain.inputs())[0])


def test_robust_kbench_numpy_task_falls_back_to_the_cpu(tmp_path, context_on):
    task = _rkb_numpy_task(tmp_path)
    cfg = task.configs[0]
    plain = runtime_for(task, "forward")
    plain.setup(cfg, 2, "cpu")
    context_on("meta")
    rt = runtime_for(task, "forward")
    rt.setup(cfg, 2, "cpu")          # Model and get_inputs raise on meta: both are built again on the CPU
    assert rt.pristine()[0].device.type == "cpu"
    assert _equal(_tensors(rt), _tensors(plain)) and _equal(_params(rt), _params(plain))


def test_kernelbench_numpy_problem_falls_back_and_its_model_stays_on_the_cpu(tmp_path, context_on):
    path = tmp_path / "cumsum_linear.py"
    path.write_text(_KB_NUMPY)
    task = load_task(path)
    cfg = task.configs[0]
    plain = runtime_for(task, "forward")
    plain.setup(cfg, 1, "cpu")
    context_on("meta")
    rt = runtime_for(task, "forward")
    mod = rt.reference_module
    mod.CALLS.clear()
    rt.setup(cfg, 1, "cpu")
    rt.reseed_inputs(cfg, 1, "cpu")
    # Model is built on the CPU (ModelNew is built there under the same seed); get_inputs tries the context first
    assert mod.CALLS == [("Model", torch.device("cpu")),
                         ("get_inputs", torch.device("meta")), ("get_inputs", torch.device("cpu")),
                         ("get_inputs", torch.device("meta")), ("get_inputs", torch.device("cpu"))]
    assert _equal(_tensors(rt), _tensors(plain)) and _equal(_params(rt), _params(plain))


# -- init schemes -------------------------------------------------------------------------------------

# (mean, std) of each scheme's distribution
MOMENTS = {"uniform": (0.0, 3 ** -0.5), "wide": (0.0, 8.0), "offset": (3.0, 0.5), "small": (0.0, 1e-3),
           "large": (100.0, 30.0), "sparse": (0.0, 2 ** -0.5)}


def _check_moments(scheme: str, x: torch.Tensor) -> None:
    mean, std = MOMENTS[scheme]
    v = x.double()
    assert abs(float(v.mean()) - mean) < 0.02 * max(std, abs(mean)) + 4 * std / v.numel() ** 0.5, scheme
    assert abs(float(v.std()) / std - 1) < 0.03, scheme
    if scheme == "uniform":
        assert float(v.min()) >= -1 and float(v.max()) <= 1
    if scheme == "sparse":
        assert abs(float((v == 0).double().mean()) - 0.5) < 0.02


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scheme", sorted(MOMENTS))
def test_init_scheme_distributions(scheme, dtype):
    ints = torch.arange(10)
    t = torch.zeros(200, 250, dtype=dtype)
    out = apply_init([t, ints, 3.5], scheme, seed=7)
    assert out[1] is ints and out[2] == 3.5
    x = out[0]
    assert x.dtype == dtype and x.shape == t.shape and x.device == t.device and x.is_contiguous()
    _check_moments(scheme, x)
    assert torch.equal(x, apply_init([t], scheme, seed=7)[0])
    assert not torch.equal(x, apply_init([t], scheme, seed=8)[0])


def test_normal_scheme_keeps_the_tensors():
    t = torch.randn(3)
    assert apply_init([t], "normal", 0)[0] is t
    with pytest.raises(ValueError, match="unknown init scheme"):
        apply_init([t], "gaussian", 0)


def test_cpu_init_draws_are_the_float64_ones_kbench_always_drew():
    t = torch.zeros(17, 9)
    gen = torch.Generator().manual_seed(5 * 7919 + 17)
    wide = (torch.randn(t.shape, generator=gen, dtype=torch.float64).to(torch.float32) * 8)
    assert torch.equal(apply_init([t], "wide", 5)[0], wide)
    gen = torch.Generator().manual_seed(5 * 7919 + 17)
    uniform = (torch.rand(t.shape, generator=gen, dtype=torch.float64) * 2 - 1).to(torch.float32)
    assert torch.equal(apply_init([t], "uniform", 5)[0], uniform)
    gen = torch.Generator().manual_seed(5 * 7919 + 17)
    x = torch.randn(t.shape, generator=gen, dtype=torch.float64).to(torch.float32)
    sparse = x * (torch.rand(t.shape, generator=gen) > 0.5).to(torch.float32)
    assert torch.equal(apply_init([t], "sparse", 5)[0], sparse)


def test_init_tensors_share_one_stream_per_device():
    a, b = apply_init([torch.zeros(50), torch.zeros(50)], "wide", 1)
    assert not torch.equal(a, b)


# -- on a GPU -----------------------------------------------------------------------------------------

def _rmsnorm():
    return load_task(builtin_tasks_dir() / "llama_rmsnorm")


@pytest.mark.gpu
@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("config", ["offset-mean", "bench"])
def test_llama_rmsnorm_inputs_are_drawn_on_cuda_and_seeded(direction, config):
    task = _rmsnorm()
    cfg = next(c for c in task.configs if c.name == config)
    rt = NativeRuntime(task, direction)
    dev = torch.device("cuda")
    rt.setup(cfg, 3, dev)
    x, w = _tensors(rt), _params(rt)
    assert all(t.device.type == "cuda" for t in x + w)
    g = rt.grad_out.clone() if direction == "backward" else None
    rt.setup(cfg, 3, dev)
    assert _equal(x, _tensors(rt)) and _equal(w, _params(rt))
    if g is not None:
        assert rt.grad_out.device.type == "cuda" and torch.equal(g, rt.grad_out)
    if cfg.init in MOMENTS:
        _check_moments(cfg.init, x[0])
    else:  # get_inputs' own torch.randn, drawn on the GPU
        assert abs(float(x[0].double().std()) - 1) < 0.03
    rt.setup(cfg, 4, dev)
    assert not _equal(x, _tensors(rt))
    del x, w, g, rt
    torch.cuda.empty_cache()


@pytest.mark.gpu
def test_llama_rmsnorm_get_inputs_runs_under_the_cuda_context():
    task = _rmsnorm()
    rt = NativeRuntime(task, "forward")
    seen = []
    get_inputs = rt.ref.get_inputs
    rt.ref.get_inputs = lambda **kw: seen.append(torch.empty(()).device.type) or get_inputs(**kw)
    try:
        rt.setup(task.configs[0], 0, torch.device("cuda"))
    finally:
        rt.ref.get_inputs = get_inputs
    assert seen == ["cuda"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scheme", sorted(MOMENTS))
def test_init_schemes_on_cuda(scheme, dtype):
    t = torch.zeros(400, 500, dtype=dtype, device="cuda")
    x = apply_init([t], scheme, seed=7)[0]
    assert x.device == t.device and x.dtype == dtype and x.is_contiguous()
    _check_moments(scheme, x)
    assert torch.equal(x, apply_init([t], scheme, seed=7)[0])
    assert not torch.equal(x, apply_init([t], scheme, seed=8)[0])


@pytest.mark.gpu
def test_numpy_task_falls_back_on_cuda(tmp_path):
    task = _native_task(tmp_path / "np", _NUMPY_REF)
    cfg = task.configs[1]
    plain = NativeRuntime(task, "backward")
    plain.setup(cfg, 4, "cpu")
    rt = NativeRuntime(task, "backward")
    rt.ref.CALLS.clear()
    rt.setup(cfg, 4, torch.device("cuda"))
    assert [dev.type for _, dev in rt.ref.CALLS] == ["cuda", "cpu", "cuda", "cpu"]
    # the task's draws come from the CPU as before (the init scheme too: it redraws a tensor where it lies),
    # then move; grad_out is drawn on the GPU
    assert all(t.device.type == "cuda" for t in _tensors(rt) + _params(rt)) and rt.grad_out.device.type == "cuda"
    assert _equal([p.cpu() for p in _params(rt)], _params(plain))
    assert _equal([t.cpu() for t in _tensors(rt)], _tensors(plain))
