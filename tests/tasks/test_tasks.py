"""The built-in task suite (tasks/): every folder loads, is well formed, and its reference behaves.

Runs on the CPU. Every non-bench config is small and is executed: outputs must be finite and
non-degenerate, every tensor argument must matter, backward tasks must honour the capture contract,
and the tolerances must admit fp32 rounding while rejecting bf16-rounded arguments.
"""

from __future__ import annotations

import ast
import functools
import textwrap
from pathlib import Path

import pytest
import torch

from engine.errors import TaskError
from engine.harness.runtimes.base import import_file
from engine.harness.runtimes.native import NativeRuntime, grad_positions
from engine.tasks.loader import builtin_tasks_dir, load_task
from engine.tasks.model import Task, TaskConfig
from engine.tasks.robust_kbench import backward_fn_call

# Non-bench configs run here, so each must stay under these forward costs (well under a second on a CPU).
CHEAP_FLOPS = 50e6
CHEAP_BYTES = 64e6

# A rough H100 roofline (fp32 CUDA cores, HBM3) for sizing the bench config.
PEAK_FLOPS = 60e12
PEAK_BYTES = 3.3e12

TASK_DIRS = sorted(p for p in builtin_tasks_dir().iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
TASK_NAMES = [p.name for p in TASK_DIRS]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # The machine is shared: keep each reference run on one core.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@functools.lru_cache(maxsize=None)
def _task(name: str) -> Task:
    return load_task(builtin_tasks_dir() / name)


@functools.lru_cache(maxsize=None)
def _ref(name: str):
    task = _task(name)
    return import_file(next(iter(task.directions.values())).reference_path, f"kbench_test_ref_{name}")


def _cheap_cases(direction: str | None = None) -> list:
    cases = []
    for name in TASK_NAMES:
        try:
            task = _task(name)
        except TaskError:
            continue  # reported by test_task_loads
        if direction and direction not in task.directions:
            continue
        for cfg in task.configs:
            if _cheap(cfg):
                cases.append(pytest.param(name, cfg.name, id=f"{name}-{cfg.name}"))
    return cases


def _cheap(cfg: TaskConfig) -> bool:
    """kbench's own small configs. robust-kbench's settings (tagged) are upstream's, trivial initialisations
    included (weight 1, bias 0), and most are GPU-sized: they are checked on the GPU
    (tests/pipeline/test_gpu_baselines.py)."""
    cost = cfg.cost.get("forward")
    return (cfg.name != "bench" and "robust-kbench" not in cfg.tags and cost is not None
            and cost.flops < CHEAP_FLOPS and cost.bytes < CHEAP_BYTES)


def _config(name: str, cname: str) -> TaskConfig:
    return next(c for c in _task(name).configs if c.name == cname)


def _build(name: str, cfg: TaskConfig, seed: int | None = None):
    """Model and inputs exactly as the harness builds them (NativeRuntime.setup), on the CPU."""
    rt = NativeRuntime(_task(name), "forward")
    rt.setup(cfg, cfg.seed if seed is None else seed, "cpu")
    return rt.model, rt.inputs()


def _fn_args(name: str, model, inputs) -> tuple:
    """The arguments Model.forward passes to fn, captured the way the harness captures them."""
    rt = NativeRuntime(_task(name), "forward")
    rt.model = model
    return rt.fn_args(inputs)


def _is_float(a) -> bool:
    return isinstance(a, torch.Tensor) and a.is_floating_point()


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets and parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _parse_signature(sig: str) -> tuple[str, list[str], list[str]]:
    """`name(a: T, b) -> (x: T, y: T)` -> (name, [a, b], [x, y])."""
    head, _, ret = sig.partition("->")
    fname, _, params = head.strip().partition("(")
    assert params.endswith(")"), f"malformed signature {sig!r}"
    names = [p.split(":")[0].strip() for p in _split_top(params[:-1])]
    ret = ret.strip()
    if ret.startswith("(") and ret.endswith(")"):
        ret = ret[1:-1]
    outs = [p.split(":")[0].strip() for p in _split_top(ret)]
    return fname.strip(), names, outs


def _forward_fn_params(name: str) -> list[str]:
    module = ast.parse(_task(name).directions["forward"].reference_path.read_text())
    fn = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "forward_fn")
    return [a.arg for a in fn.args.args]


def _run(name: str, args: tuple, direction: str, grad_out=None) -> tuple:
    fn = _ref(name).forward_fn
    if direction == "forward":
        with torch.no_grad():
            return (fn(*args),)
    diff = set(grad_positions(args, _task(name).directions["backward"].no_grad))
    leaves = tuple(a.clone().requires_grad_(True) if i in diff else a for i, a in enumerate(args))
    wrt = [leaves[i] for i in sorted(diff)]
    with torch.enable_grad():
        out = fn(*leaves)
        return torch.autograd.grad(out, wrt, grad_out.to(out.dtype))


def _allowance_ratio(got: tuple, want: tuple, atol: float, rtol: float) -> float:
    """max |got - want| / (atol + rtol |want|): <= 1 passes the harness's element-wise check."""
    worst = 0.0
    for g, w in zip(got, want):
        g, w = g.double(), w.double()
        worst = max(worst, float(((g - w).abs() / (atol + rtol * w.abs())).max()))
    return worst


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).to(t.dtype)


def _grad_out(name: str, cfg: TaskConfig, args: tuple) -> torch.Tensor:
    with torch.no_grad():
        out = _ref(name).forward_fn(*args)
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    return torch.randn(out.shape, generator=gen, dtype=out.dtype)


# -- structure ---------------------------------------------------------------------------------------

def test_suite_is_present():
    expected = {"layernorm", "llama_rmsnorm", "llama_ffw", "mnist_conv_relu_pool", "mnist_cross_entropy",
                "mnist_linear", "mnist_linear_relu", "mnist_pool", "resnet_block", "unet_conv2d",
                "unet_linear", "softmax", "sdpa", "rotary", "layernorm_lastdim", "unet_double_conv"}
    assert expected <= set(TASK_NAMES)


# robust-kbench's tasks as SakanaAI/robust-kbench (commit 078f5ba) defines them: forward_fn's parameters,
# Model.__init__'s and get_inputs' (the keys of its config files). A built-in task tagged robust-kbench must keep
# them, so an upstream kernel runs on it unmodified and upstream's settings are configs of it.
UPSTREAM = {
    "layernorm": (["x", "weight", "bias", "eps"], ["num_features", "dim1", "dim2", "eps", "init_method"],
                  ["batch_size", "num_features", "dim1", "dim2"]),
    "llama_ffw": (["x", "gate_proj", "up_proj", "down_proj"], ["num_features", "up_features"],
                  ["batch_size", "num_tokens", "num_features"]),
    "llama_rmsnorm": (["x", "w", "eps"], ["num_features", "eps"], ["batch_size", "num_tokens", "num_features"]),
    "mnist_conv_relu_pool": (["x", "weights", "biases"],
                             ["in_channels", "out_channels", "kernel_size", "stride", "init_method"],
                             ["batch_size", "in_channels", "height", "width"]),
    "mnist_cross_entropy": (["predictions", "targets"], [], ["batch_size", "num_classes"]),
    "mnist_linear": (["x", "weights", "biases"], ["num_input_features", "num_output_features", "init_method"],
                     ["batch_size", "num_input_features"]),
    "mnist_linear_relu": (["x", "weights", "biases"], ["num_input_features", "num_output_features", "init_method"],
                          ["batch_size", "num_input_features"]),
    "mnist_pool": (["x"], [], ["batch_size", "in_channels", "height", "width"]),
    "resnet_block": (["x", "conv1_weight", "conv1_bias", "bn1_weight", "bn1_bias", "bn1_mean", "bn1_var",
                      "conv2_weight", "conv2_bias", "bn2_weight", "bn2_bias", "bn2_mean", "bn2_var",
                      "downsample_weight", "downsample_bias", "downsample_bn_weight", "downsample_bn_bias",
                      "downsample_bn_mean", "downsample_bn_var", "stride", "eps"],
                     ["in_channels", "out_channels", "stride", "downsample"], ["batch_size", "in_channels"]),
    "unet_conv2d": (["x", "weights", "biases", "stride", "padding"],
                    ["in_channels", "out_channels", "kernel_size", "stride", "padding", "init_method"],
                    ["batch_size", "in_channels", "height", "width"]),
    "unet_linear": (["x", "weights", "biases"], ["num_input_features", "num_output_features", "init_method"],
                    ["batch_size", "num_input_features", "height", "width"]),
}


def test_robust_kbench_tags_name_exactly_robust_kbenchs_tasks():
    tagged = {n for n in TASK_NAMES if "robust-kbench" in _task(n).tags}
    assert tagged == set(UPSTREAM)


@pytest.mark.parametrize("name", sorted(UPSTREAM))
def test_robust_kbench_tasks_keep_upstreams_signature_and_settings(name):
    fn, model, inputs = UPSTREAM[name]
    module = ast.parse(_task(name).directions["forward"].reference_path.read_text())
    from engine.tasks import pysource
    path = _task(name).directions["forward"].reference_path
    assert _forward_fn_params(name) == fn
    # kbench may add parameters after upstream's (with defaults), never rename or reorder them
    assert list(pysource.class_init_params(module, "Model", path).names[:len(model)]) == model
    assert list(pysource.function_params(module, "get_inputs", path).names[:len(inputs)]) == inputs
    configs = [c for c in _task(name).configs if "robust-kbench" in c.tags]
    assert any("single" in c.tags for c in configs) and any("multi" in c.tags for c in configs)
    assert any("robust-kbench" not in c.tags and c.name != "bench" for c in _task(name).configs), \
        "kbench's own odd-size configs stay beside upstream's"


@pytest.mark.parametrize("name", TASK_NAMES)
def test_task_loads_and_is_well_formed(name):
    task = load_task(builtin_tasks_dir() / name)
    assert task.format == "native"
    assert task.dtype == "float32"
    names = [c.name for c in task.configs]
    assert len(names) >= 3
    assert len(set(names)) == len(names)
    assert names.count("bench") == 1

    sizes = [v for c in task.configs if c.name != "bench"
             for v in {**c.model_kwargs, **c.input_kwargs}.values()
             if isinstance(v, int) and not isinstance(v, bool) and v >= 5]
    assert any(v % 32 for v in sizes), "needs sizes that are not multiples of 32"
    assert len({c.init for c in task.configs}) >= 2, "mix init schemes"
    assert len({c.seed for c in task.configs}) >= 2, "mix seeds"

    for cfg in task.configs:
        assert set(cfg.cost) == set(task.directions), f"{cfg.name}: a cost model per direction"
        for d, cost in cfg.cost.items():
            assert cost.flops > 0 and cost.bytes > 0, f"{cfg.name} {d}: {cost}"
        if cfg.name != "bench" and "robust-kbench" not in cfg.tags:  # upstream's sizes run on the GPU only
            assert _cheap(cfg), f"{cfg.name} is too big to run on a CPU here"

    # bench: big enough to time on an H100 (its roofline floor is a lower bound on a real kernel's time)
    bench = next(c for c in task.configs if c.name == "bench")
    for d, cost in bench.cost.items():
        floor_ms = 1e3 * max(cost.flops / PEAK_FLOPS, cost.bytes / PEAK_BYTES)
        assert 0.02 <= floor_ms <= 2.0, f"bench {d}: roofline floor {floor_ms:.3f} ms"

    for spec in task.directions.values():
        assert 0 <= spec.tolerance.atol <= 0.1 and 0 <= spec.tolerance.rtol <= 1e-3


@pytest.mark.parametrize("name", TASK_NAMES)
def test_signatures_match_forward_fn(name):
    task = _task(name)
    params = _forward_fn_params(name)
    fname, names, outs = _parse_signature(task.directions["forward"].signature)
    assert fname == "forward" and names == params and len(outs) == 1
    if "backward" in task.directions:
        fname, names, outs = _parse_signature(task.directions["backward"].signature)
        assert fname == "backward"
        spec = task.directions["backward"]
        if spec.autograd_backward:   # robust-kbench's convention: what AutogradFunction.backward passes backward_fn
            call, _ = backward_fn_call(ast.parse(spec.reference_path.read_text()), spec.reference_path)
            assert len(names) == len(call.args), "backward(<the arguments of AutogradFunction.backward_fn(...)>)"
        else:
            assert names[1:] == params, "backward(grad_out, *forward_fn's params)"
        assert outs and all(o.startswith("grad_") for o in outs)


# -- reference behaviour ------------------------------------------------------------------------------

@pytest.mark.parametrize("name,cname", _cheap_cases())
def test_reference_forward_is_finite_and_not_degenerate(name, cname):
    cfg = _config(name, cname)
    task = _task(name)
    tol = task.directions["forward"].tolerance
    model, inputs = _build(name, cfg)
    assert all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in inputs)

    # Parameters and buffers are initialised non-trivially: no constant (all-ones, all-zeros) tensors.
    for pname, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.numel() > 1 and t.is_floating_point():
            assert float(t.detach().std()) > 0, f"{pname} is constant"

    with torch.no_grad():
        y = model(*inputs)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    assert bool(torch.isfinite(y).all())
    if y.numel() > 1:
        assert float(y.abs().max()) > 0
        assert float(y.std()) > 1e-4 * float(y.abs().max()), "output is near-constant"

    # Other inputs give a different output (beyond the tolerance: a kernel that ignores them fails).
    _, inputs2 = _build(name, cfg, seed=cfg.seed + 1000)
    with torch.no_grad():
        y2 = model(*inputs2)
    assert _allowance_ratio((y2,), (y,), tol.atol, tol.rtol) > 1


@pytest.mark.parametrize("name,cname", _cheap_cases())
def test_every_tensor_argument_matters(name, cname):
    """Replacing any tensor passed to fn by zeros or ones changes the output beyond the tolerance."""
    cfg = _config(name, cname)
    tol = _task(name).directions["forward"].tolerance
    model, inputs = _build(name, cfg)
    args = _fn_args(name, model, inputs)
    (y,) = _run(name, args, "forward")
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            continue
        for fill in (0, 1):
            changed = list(args)
            changed[i] = torch.full_like(a, fill)
            (y2,) = _run(name, tuple(changed), "forward")
            assert _allowance_ratio((y2,), (y,), tol.atol, tol.rtol) > 1, \
                f"argument {i} replaced by {fill}s leaves the output unchanged"


@pytest.mark.parametrize("name,cname", _cheap_cases("backward"))
def test_backward_capture_contract(name, cname):
    task = _task(name)
    cfg = _config(name, cname)
    model, inputs = _build(name, cfg)
    with torch.no_grad():
        out = model(*inputs)
    assert isinstance(out, torch.Tensor), "a backward task's forward returns one tensor"

    args = _fn_args(name, model, inputs)
    floats = [args[i] for i in grad_positions(args, task.directions["backward"].no_grad)]
    grads = _run(name, args, "backward", _grad_out(name, cfg, args))
    _, _, outs = _parse_signature(task.directions["backward"].signature)
    assert len(grads) == len(floats) == len(outs)
    for g, a, oname in zip(grads, floats, outs):
        assert g is not None and g.shape == a.shape, oname
        assert bool(torch.isfinite(g).all()), oname
        assert float(g.abs().max()) > 0, f"{oname} is all zeros"


@pytest.mark.parametrize("name,cname", _cheap_cases())
def test_tolerance_admits_fp32_rounding(name, cname):
    """fp32 vs fp64 stays well inside the allowance (a GPU kernel's own rounding adds about as much)."""
    task = _task(name)
    cfg = _config(name, cname)
    model, inputs = _build(name, cfg)
    args = _fn_args(name, model, inputs)
    args64 = tuple(a.double() if _is_float(a) else a for a in args)
    for d, spec in task.directions.items():
        gout = _grad_out(name, cfg, args) if d == "backward" else None
        got = _run(name, args, d, gout)
        want = _run(name, args64, d, gout.double() if gout is not None else None)
        ratio = _allowance_ratio(got, want, spec.tolerance.atol, spec.tolerance.rtol)
        assert ratio < 0.5, f"{d}: fp32 error uses {ratio:.2f} of the tolerance"


@pytest.mark.parametrize("name", TASK_NAMES)
def test_tolerance_rejects_bf16(name):
    """Rounding every float argument (and grad_out) to bf16 fails at least one config per direction."""
    task = _task(name)
    cheap = [c for c in task.configs if _cheap(c)]
    for d, spec in task.directions.items():
        worst = 0.0
        for cfg in cheap:
            model, inputs = _build(name, cfg)
            args = _fn_args(name, model, inputs)
            gout = _grad_out(name, cfg, args) if d == "backward" else None
            want = _run(name, tuple(a.double() if _is_float(a) else a for a in args), d,
                        gout.double() if gout is not None else None)
            rounded = tuple(_bf16(a).double() if _is_float(a) else a for a in args)
            got = _run(name, rounded, d, _bf16(gout).double() if gout is not None else None)
            worst = max(worst, _allowance_ratio(got, want, spec.tolerance.atol, spec.tolerance.rtol))
        assert worst > 1, f"{d}: bf16-rounded arguments pass every config (worst {worst:.2f})"


# -- malformed tasks ----------------------------------------------------------------------------------

_GOOD_REF = textwrap.dedent("""
    import torch
    import torch.nn as nn

    def forward_fn(x, scale):
        return x * scale

    class Model(nn.Module):
        def __init__(self, hidden):
            super().__init__()
            self.scale = nn.Parameter(torch.randn(hidden))

        def forward(self, x, fn=forward_fn):
            return fn(x, self.scale)

    def get_inputs(batch, hidden):
        return [torch.randn(batch, hidden)]
""")

_GOOD_TOML = textwrap.dedent("""
    name = "scale"
    dtype = "float32"
    directions = ["forward"]

    [forward]
    signature = "forward(x: f32[B,N], scale: f32[N]) -> y: f32[B,N]"
    atol = 1e-5
    rtol = 1e-5
    flops = "batch * hidden"
    bytes = "dtype_bytes * (2 * batch * hidden + hidden)"

    [[configs]]
    name = "small"
    args = { batch = 3, hidden = 37 }

    [[configs]]
    name = "other"
    args = { batch = 5, hidden = 65 }
    seed = 1
""")


def _write_task(root: Path, ref: str = _GOOD_REF, toml: str = _GOOD_TOML) -> Path:
    root.mkdir()
    (root / "reference.py").write_text(ref)
    (root / "task.toml").write_text(toml)
    return root


def test_fixture_task_is_valid(tmp_path):
    task = load_task(_write_task(tmp_path / "good"))
    assert [c.name for c in task.configs] == ["small", "other"]
    assert task.configs[0].model_kwargs == {"hidden": 37}
    assert task.configs[0].input_kwargs == {"batch": 3, "hidden": 37}


def test_syntax_error_in_reference_names_the_file(tmp_path):
    root = _write_task(tmp_path / "bad", ref=_GOOD_REF.replace("def forward_fn(x, scale):", "def forward_fn(x, scale"))
    with pytest.raises(TaskError) as exc:
        load_task(root)
    assert str(root / "reference.py") in str(exc.value)
    assert "syntax" in str(exc.value).lower()


def test_missing_config_key_names_the_file(tmp_path):
    root = _write_task(tmp_path / "bad", toml=_GOOD_TOML.replace('args = { batch = 5, hidden = 65 }\n', ""))
    with pytest.raises(TaskError) as exc:
        load_task(root)
    assert str(root / "task.toml") in str(exc.value)
    assert "args" in str(exc.value)


def test_unknown_arg_names_the_file_and_arg(tmp_path):
    root = _write_task(tmp_path / "bad", toml=_GOOD_TOML.replace("hidden = 65 }", "hidden = 65, heads = 4 }"))
    with pytest.raises(TaskError) as exc:
        load_task(root)
    assert str(root / "task.toml") in str(exc.value)
    assert "heads" in str(exc.value)


@pytest.mark.parametrize("expr", ["batch * hiden", "__import__('os').getpid()", "batch *"])
def test_bad_cost_expression_names_the_file(tmp_path, expr):
    root = _write_task(tmp_path / "bad", toml=_GOOD_TOML.replace('flops = "batch * hidden"', f'flops = "{expr}"'))
    with pytest.raises(TaskError) as exc:
        load_task(root)
    assert str(root / "task.toml") in str(exc.value)
    assert "cost" in str(exc.value)
