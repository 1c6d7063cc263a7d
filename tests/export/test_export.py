"""`kbench export` on the CPU: package files, schema derivation, verdict gating, workspace and CLI paths.

The build itself is in tests/export/test_export_build.py (slow) and tests/export/test_gpu_export.py (gpu)."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from engine.candidates import load_candidate
from engine.cli import main
from engine.export import ExportError, names, package_files, plan_from_dirs, plan_from_workspace, write_package
from engine.export.autograd_call import autograd_backward_schema, derive_call
from engine.export.render import placeholders, template_path
from engine.export.schema import backward_schema, find_entry, forward_schema
from engine.tasks.loader import load_task
from engine.verdict import Status, Verdict
from engine.workspace import ConfigTiming, Measurement, Workspace
from tests.paths import FIXTURES, REPO

TASKS = REPO / "tasks"
RK = FIXTURES / "robust_kbench"
LN_FWD = TASKS / "layernorm" / "baselines" / "forward"
LN_BWD = TASKS / "layernorm" / "baselines" / "backward"


def sig(task: str, direction: str = "forward") -> str:
    return load_task(task).spec(direction).signature


# --------------------------------------------------------------------------------------- schemas


def test_schema_layernorm_forward_and_backward():
    task = load_task("layernorm")
    entry = find_entry((LN_FWD / "binding.cpp").read_text(), "forward")
    fwd = forward_schema(task.spec("forward").signature, entry)
    assert fwd.text == "forward(Tensor x, Tensor weight, Tensor bias, float eps) -> Tensor"
    bentry = find_entry((LN_BWD / "binding.cpp").read_text(), "backward")
    # robust-kbench's convention: the formula's call is derived from the reference's AutogradFunction
    call = derive_call(task)
    assert [c.to_json() for c in call.call] == [
        {"from": "grad"}, {"from": "arg", "index": 0}, {"from": "arg", "index": 1}, {"from": "arg", "index": 2},
        {"from": "arg", "index": 3}, {"from": "shape", "index": 1}]    # normalized_shape: weight's shape
    bwd = autograd_backward_schema(fwd, task, call, bentry)
    assert bwd.text == ("backward(Tensor grad_y, Tensor x, Tensor weight, Tensor bias, float eps, "
                        "int[] normalized_shape) -> Tensor[]")
    assert bwd.grad_positions == (0, 1, 2)
    assert [a.cpp_type for a in bwd.args][-2:] == ["double", "at::IntArrayRef"]


def test_the_convention_call_is_derived_from_the_reference():
    """mnist_conv_relu_pool's AutogradFunction passes (x, weights, biases, grad_output): each follows from fn's
    arguments or the gradient, and the kernel's results come back as fn's gradients in order."""
    call = derive_call(load_task("mnist_conv_relu_pool"))
    assert [c.to_json() for c in call.call] == [{"from": "arg", "index": 0}, {"from": "arg", "index": 1},
                                                {"from": "arg", "index": 2}, {"from": "grad"}]
    assert call.grad_positions == (0, 1, 2)
    name = "mnist_conv_relu_pool"
    plan = plan_from_dirs(TASKS / name / "baselines" / "forward", name, TASKS / name / "baselines" / "backward")
    assert plan.backward_schema.text == "backward(Tensor x, Tensor weights, Tensor biases, Tensor grad_y) -> Tensor[]"
    meta = json.loads(package_files(plan)["src/kbench_mnist_conv_relu_pool/export.json"])
    assert meta["ops"]["backward"]["call"][-1] == {"from": "grad"} and meta["ops"]["backward"]["grad_like"] == [0, 1, 2]


@pytest.mark.parametrize("name, why", [
    ("mnist_pool", "`saved`, a tuple of tensors"),                     # (ctx.saved_tensors, grad_output)
    ("mnist_linear", "returns the gradient of biases without receiving it")])   # (grad_output, x, weights)
def test_a_convention_export_cannot_derive_is_refused_with_its_reason(name, why):
    with pytest.raises(ExportError, match=re.escape(why)):
        plan_from_dirs(TASKS / name / "baselines" / "forward", name, TASKS / name / "baselines" / "backward")
    plan = plan_from_dirs(TASKS / name / "baselines" / "forward", name)     # the forward still exports
    assert plan.backward_schema is None


def _layernorm_variant(tmp_path, old, new):
    """The built-in layernorm as a task folder of its own, its AutogradFunction.backward edited."""
    folder = tmp_path / "ln"
    folder.mkdir()
    shutil.copy(TASKS / "layernorm" / "task.toml", folder / "task.toml")
    text = (TASKS / "layernorm" / "reference.py").read_text()
    assert old in text
    (folder / "reference.py").write_text(text.replace(old, new))
    return load_task(folder)


def test_derivation_refuses_an_argument_that_follows_no_rule(tmp_path):
    # normalized_shape doubled: no forward tensor has that shape, so no formula reproduces it
    task = _layernorm_variant(tmp_path, "ctx.normalized_shape = tuple(x.shape[-weight.dim():])",
                              "ctx.normalized_shape = tuple(2 * n for n in x.shape[-weight.dim():])")
    with pytest.raises(ExportError, match="normalized_shape` = .* no forward tensor argument's shape"):
        derive_call(task)


def test_derivation_refuses_gradients_out_of_order(tmp_path):
    task = _layernorm_variant(tmp_path, "return grad_x, grad_weight, grad_bias, None",
                              "return grad_x, grad_bias, grad_weight, None")
    with pytest.raises(ExportError, match="does not return the backward kernel's results as the gradients"):
        derive_call(task)


def test_schema_softmax():
    fwd = forward_schema(sig("softmax"))
    assert fwd.text == "forward(Tensor x) -> Tensor"
    assert backward_schema(fwd, sig("softmax", "backward")).text == "backward(Tensor grad_y, Tensor x) -> Tensor[]"


def test_schema_resnet_block_optional_tensors_and_scalars():
    entry = find_entry((TASKS / "resnet_block" / "baselines" / "forward" / "binding.cpp").read_text(), "forward")
    fwd = forward_schema(sig("resnet_block"), entry)
    by_name = {a.name: a for a in fwd.args}
    assert by_name["downsample_weight"].schema_type == "Tensor?"
    assert by_name["conv1_bias"].schema_type == "Tensor?" and by_name["downsample_bias"].schema_type == "Tensor?"
    assert by_name["downsample_bn_var"].cpp_type == "const std::optional<at::Tensor>&"
    assert by_name["x"].schema_type == "Tensor"
    assert by_name["stride"].schema_type == "int" and by_name["stride"].cpp_type == "int64_t"
    assert by_name["eps"].schema_type == "float"
    assert fwd.text.endswith(", int stride, float eps) -> Tensor")


def test_schema_other_builtin_tasks():
    assert forward_schema(sig("sdpa")).text == "forward(Tensor q, Tensor k, Tensor v, bool is_causal) -> Tensor"
    ce = forward_schema(sig("mnist_cross_entropy"))
    assert ce.text == "forward(Tensor predictions, Tensor targets) -> Tensor"
    conv = forward_schema(sig("unet_conv2d"))
    assert conv.text == "forward(Tensor x, Tensor weights, Tensor biases, int stride, int padding) -> Tensor"
    rot = load_task("rotary")
    bwd = backward_schema(forward_schema(rot.spec("forward").signature), rot.spec("backward").signature,
                          rot.spec("backward").no_grad)
    assert bwd.grad_positions == (0,)  # cos and sin are no_grad


def test_schema_robust_kbench_annotations():
    task = load_task(RK / "linear")
    fwd = forward_schema(task.spec("forward").signature)
    assert fwd.text == "forward(Tensor x, Tensor weight, Tensor bias) -> Tensor"
    assert forward_schema("forward(x: Optional[torch.Tensor], n: int) -> torch.Tensor").text == \
        "forward(Tensor? x, int n) -> Tensor"
    assert forward_schema("forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]").returns_list


def test_schema_unannotated_filled_from_binding():
    src = ("#include <torch/extension.h>\n"
           "std::vector<torch::Tensor> my_fwd(const torch::Tensor& x, c10::optional<torch::Tensor> w, int k,\n"
           "                                  float alpha, bool flag) { return {x}; }\n"
           "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"forward\", &my_fwd, \"doc\"); }\n")
    entry = find_entry(src, "forward")
    assert entry.function == "my_fwd"
    fwd = forward_schema("forward(x, w, k, alpha, flag)", entry)
    assert fwd.text == "forward(Tensor x, Tensor? w, int k, float alpha, bool flag) -> Tensor[]"


def test_schema_tuples_and_lists_are_int_and_float_lists():
    fwd = forward_schema("forward(x: torch.Tensor, k: tuple, s: tuple[int, int], f: list[float], "
                         "n: typing.Tuple[int, ...], v: Sequence[float]) -> torch.Tensor")
    assert fwd.text == "forward(Tensor x, int[] k, int[] s, float[] f, int[] n, float[] v) -> Tensor"
    assert [a.cpp_type for a in fwd.args[1:3]] == ["at::IntArrayRef", "at::IntArrayRef"]
    assert fwd.args[3].cpp_type == "at::ArrayRef<double>"
    # a bare tuple, or no annotation, takes its element type from the binding
    src = ("#include <torch/extension.h>\n"
           "torch::Tensor fwd(torch::Tensor x, std::vector<double> scale, c10::IntArrayRef shape, std::vector<int> pads)"
           " { return x; }\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"forward\", &fwd); }\n")
    entry = find_entry(src, "forward")
    fwd = forward_schema("forward(x, scale: tuple, shape, pads: list) -> torch.Tensor", entry)
    assert fwd.text == "forward(Tensor x, float[] scale, int[] shape, int[] pads) -> Tensor"
    with pytest.raises(ExportError, match="optional list"):
        forward_schema("forward(x: f32[N], sizes: list[int] | None) -> y: f32[N]")


def test_shim_converts_lists_to_the_bindings_vector_type(tmp_path):
    folder = tmp_path / "k"
    folder.mkdir()
    (folder / "kernel.cu").write_text("#include <cuda_runtime.h>\n__global__ void k() {}\n")
    (folder / "binding.cpp").write_text(
        "#include <torch/extension.h>\n"
        "torch::Tensor forward(torch::Tensor x, std::vector<int> pads, c10::IntArrayRef shape, double eps) "
        "{ return x; }\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"forward\", &forward); }\n")
    task = tmp_path / "t"
    task.mkdir()
    (task / "reference.py").write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "def forward_fn(x, pads: tuple, shape: tuple, eps: float):\n    return x.reshape(shape) * eps\n\n"
        "class Model(nn.Module):\n    def forward(self, x, fn=forward_fn):\n        return fn(x, (1, 2), (-1,), 0.5)\n\n"
        "def get_inputs(n: int):\n    return [torch.randn(n)]\n")
    (task / "task.toml").write_text(
        'name = "t"\ndirections = ["forward"]\n[forward]\nsignature = "forward(x: f32[N], pads: tuple, '
        'shape: tuple, eps: float) -> y: f32[N]"\natol = 1e-5\nrtol = 1e-5\n'
        '[[configs]]\nname = "a"\nargs = { n = 5 }\n')
    files = package_files(plan_from_dirs(folder, task, force=True))
    shim = files["csrc/forward_op.cpp"]
    assert "at::IntArrayRef pads, at::IntArrayRef shape, double eps" in shim
    assert "forward(x, std::vector<int>(pads.begin(), pads.end()), shape, eps)" in shim
    meta = json.loads(files["src/kbench_t/export.json"])
    assert meta["ops"]["forward"]["schema"] == "forward(Tensor x, int[] pads, int[] shape, float eps) -> Tensor"


def test_schema_refuses_unrepresentable_arguments():
    with pytest.raises(ExportError, match="no op schema type"):
        forward_schema("forward(x: f32[N], names: list[str]) -> y: f32[N]")
    with pytest.raises(ExportError, match="cannot tell the type of argument `x`"):
        forward_schema("forward(x) -> y")
    src = "torch::Tensor forward(torch::Tensor x) { return x; }\nPYBIND11_MODULE(n, m) { m.def(\"forward\", &forward); }"
    with pytest.raises(ExportError, match="takes 1"):
        forward_schema("forward(x: f32[N], y: f32[N]) -> f32[N]", find_entry(src, "forward"))
    with pytest.raises(ExportError, match="not a named function"):
        find_entry('PYBIND11_MODULE(n, m) { m.def("forward", [](torch::Tensor x) { return x; }); }', "forward")
    with pytest.raises(ExportError, match="exports no `backward`"):
        find_entry(src, "backward")


def test_backward_schema_needs_grad_plus_forward_arguments():
    fwd = forward_schema("forward(x: f32[N], w: f32[N]) -> f32[N]")
    with pytest.raises(ExportError, match="needs 3"):
        backward_schema(fwd, "backward(grad, x) -> grad_x")


def test_names():
    assert names.default_name("layernorm") == "kbench_layernorm"
    assert names.sanitize("My Task-v2.cu") == "my_task_v2_cu"
    assert names.sanitize("3x3conv") == "k_3x3conv"
    assert names.sanitize("aten") == "kbench_aten"
    assert names.class_name("kbench_layernorm") == "KbenchLayernorm"
    assert names.check_name("ln_fast") == "ln_fast"
    with pytest.raises(ExportError, match="try --name my_ext"):
        names.check_name("My-Ext")


# -------------------------------------------------------------------------------------- packages


def _check_package(out: Path, ns: str) -> dict:
    """Files present and well-formed; returns export.json."""
    expected = ["pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "csrc/kbench_export.h",
                f"src/{ns}/__init__.py", f"src/{ns}/ops.py", f"src/{ns}/modules.py", f"src/{ns}/reference.py",
                f"src/{ns}/_inits.py", f"src/{ns}/export.json", "tests/conftest.py", f"tests/test_{ns}_cpu.py",
                f"tests/test_{ns}.py"]
    for rel in expected:
        assert (out / rel).is_file(), rel
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert "{{" not in text or path.parent.name in ("forward", "backward"), f"unrendered placeholder in {path}"
            if path.suffix == ".py":
                ast.parse(text, filename=str(path))
    tomllib.loads((out / "pyproject.toml").read_text())
    assert "CUDAExtension" in (out / "setup.py").read_text()
    meta = json.loads((out / "src" / ns / "export.json").read_text())
    assert meta["namespace"] == ns
    return meta


def test_layernorm_baselines_package(tmp_path):
    plan = plan_from_dirs(LN_FWD, "layernorm", LN_BWD)
    assert not plan.warnings and not plan.forced  # shipped baselines count as passing
    out = tmp_path / "pkg"
    write_package(plan, out)
    meta = _check_package(out, "kbench_layernorm")
    task = load_task("layernorm")
    assert [c["name"] for c in meta["configs"]] == [c.name for c in task.configs]
    assert meta["configs"][1]["seed"] == task.configs[1].seed and meta["configs"][1]["init"] == "offset"
    assert meta["task_format"] == "native"
    assert meta["ops"]["forward"]["schema"] == "forward(Tensor x, Tensor weight, Tensor bias, float eps) -> Tensor"
    assert meta["ops"]["backward"]["returns_list"] is True
    assert meta["tolerance"]["backward"]["atol"] == 1e-4
    # the candidates' files are copied byte for byte; the shims include them with PYBIND11_MODULE disabled
    for d, src in (("forward", LN_FWD), ("backward", LN_BWD)):
        for f in ("kernel.cu", "binding.cpp"):
            assert (out / "csrc" / d / f).read_text() == (src / f).read_text()
    shim = (out / "csrc" / "forward_op.cpp").read_text()
    assert '#include "forward/binding.cpp"' in shim
    assert shim.index("#define PYBIND11_MODULE") < shim.index('#include "forward/binding.cpp"')
    assert "TORCH_LIBRARY(kbench_layernorm, m)" in shim
    assert 'm.def("forward(Tensor x, Tensor weight, Tensor bias, float eps) -> Tensor");' in shim
    assert 'm.impl("forward", TORCH_FN(kbench_forward_op));' in shim
    assert "PyInit__C(void)" in shim
    bshim = (out / "csrc" / "backward_op.cpp").read_text()
    assert "TORCH_LIBRARY(" not in bshim and "TORCH_LIBRARY_IMPL(kbench_layernorm, CUDA, m)" in bshim
    # upstream's argument order: normalized_shape (the op's int[]) after eps, as the binding's std::vector<int64_t>
    assert ("kbench_export::list(backward(grad_y, x, weight, bias, eps, "
            "std::vector<int64_t>(normalized_shape.begin(), normalized_shape.end())))") in bshim
    assert meta["ops"]["backward"]["call"][-1] == {"from": "shape", "index": 1}
    assert meta["ops"]["backward"]["grad_like"] == [1, 2, 3]
    pkg = out / "src" / "kbench_layernorm"
    ops = (pkg / "ops.py").read_text()
    assert 'register_fake(f"{NAMESPACE}::forward")' in ops and "register_autograd" in ops
    assert "class KbenchLayernorm(reference.Model)" in (pkg / "modules.py").read_text()
    assert (pkg / "reference.py").read_text() == (TASKS / "layernorm" / "reference.py").read_text()
    test = (out / "tests" / "test_kbench_layernorm.py").read_text()
    assert "torch.library.opcheck" in test and "fullgraph=True" in test and "seed + 1" in test
    assert "pytestmark = pytest.mark.gpu" in test
    cpu = (out / "tests" / "test_kbench_layernorm_cpu.py").read_text()
    assert "torch.export.export" in cpu and 'device("meta")' in cpu and "mark.gpu" not in cpu
    setup = (out / "setup.py").read_text()
    assert 'package_dir={"": "src"}' in setup and 'ARCHS = "9.0+PTX"' in setup
    readme = (out / "README.md").read_text()
    assert "WARNING" not in readme and "shipped backward baseline" in readme
    assert "`torch.ops.kbench_layernorm.backward`" in readme
    assert "**The GPUs**: `9.0+PTX`, chosen at export" in readme


def test_forward_only_package_has_no_autograd(tmp_path):
    plan = plan_from_dirs(TASKS / "softmax" / "baselines" / "forward", "softmax", name="sm")
    assert any("no autograd" in n for n in plan.notes)
    files = package_files(plan)
    assert "csrc/backward_op.cpp" not in files
    meta = json.loads(files["src/sm/export.json"])
    assert list(meta["ops"]) == ["forward"]
    assert "_C_backward" not in files["setup.py"] and "_C_backward" not in files["src/sm/__init__.py"]
    assert "no_gradient" in files["src/sm/ops.py"] and "raises a RuntimeError" in files["README.md"]


def test_resnet_block_shim_passes_optionals():
    plan = plan_from_dirs(TASKS / "resnet_block" / "baselines" / "forward", "resnet_block")
    shim = package_files(plan)["csrc/forward_op.cpp"]
    assert "const std::optional<at::Tensor>& downsample_weight" in shim
    assert "const std::optional<at::Tensor>& conv1_bias" in shim
    assert "int64_t stride, double eps" in shim
    assert "Tensor? downsample_weight" in shim


def test_robust_kbench_candidates_package(tmp_path):
    with pytest.raises(ExportError, match="no passing verdict"):
        plan_from_dirs(RK / "candidates" / "linear_forward_correct.cu", RK / "linear")
    # upstream's backward kernel takes AutogradFunction.backward's own arguments: no autograd formula to derive
    with pytest.raises(ExportError, match="robust-kbench.s backward convention: its backward kernel takes the task-specific"):
        plan_from_dirs(RK / "candidates" / "linear_forward_correct.cu", RK / "linear",
                       RK / "candidates" / "linear_backward_correct.cu", force=True)
    plan = plan_from_dirs(RK / "candidates" / "linear_forward_correct.cu", RK / "linear", force=True)
    out = tmp_path / "rk"
    write_package(plan, out)
    meta = _check_package(out, "kbench_linear")
    assert meta["ops"]["forward"]["schema"] == "forward(Tensor x, Tensor weight, Tensor bias) -> Tensor"
    assert "backward" not in meta["ops"]
    assert len(meta["configs"]) == len(load_task(RK / "linear").configs)
    assert (out / "csrc" / "forward" / "linear_forward_correct.cu").is_file()
    shim = (out / "csrc" / "forward_op.cu").read_text()   # torch + kernels in one file: nvcc compiles the shim
    assert '#include "forward/linear_forward_correct.cu"' in shim
    setup = (out / "setup.py").read_text()
    assert "'csrc/forward_op.cu'" in setup and "kernel.cu" not in setup
    assert (out / "src" / "kbench_linear" / "reference.py").read_text() == \
        (RK / "linear" / "func_forward.py").read_text()
    readme = (out / "README.md").read_text()
    assert "WARNING: exported with --force" in readme and "no passing verdict" in readme
    assert meta["forced"] is True and len(meta["warnings"]) == 1


def test_a_kernelbench_problem_exports_modelnew_candidates_only(tmp_path):
    """A ModelNew exports (tests/export/test_export_kernelbench.py); a native kernel has no contract with a
    KernelBench problem, which has no functional forward_fn."""
    with pytest.raises(ExportError, match="its candidates are ModelNew files"):
        plan_from_dirs(LN_FWD, FIXTURES / "kernelbench" / "matmul_relu.py", force=True)


def test_folder_without_verdict_refused_then_forced(tmp_path):
    folder = tmp_path / "mine"
    shutil.copytree(LN_FWD, folder)
    with pytest.raises(ExportError, match="refusing to export.*--force"):
        plan_from_dirs(folder, "layernorm")
    plan = plan_from_dirs(folder, "layernorm", force=True)
    write_package(plan, tmp_path / "out")
    assert "WARNING: exported with --force" in (tmp_path / "out" / "README.md").read_text()


def test_templates_placeholders_are_all_known():
    plan = plan_from_dirs(LN_FWD, "layernorm", LN_BWD)
    files = package_files(plan)  # render() raises on any missing placeholder
    assert files
    assert placeholders(template_path("csrc/kbench_export.h").read_text()) == set()


# ------------------------------------------------------------------------------------- workspace


@pytest.fixture
def ws(tmp_path):
    # the built-in layernorm (whose baselines these tests export) as a task folder of the user's own
    folder = tmp_path / "task-layernorm"
    folder.mkdir()
    for name in ("task.toml", "reference.py"):
        shutil.copy(TASKS / "layernorm" / name, folder / name)
    task = load_task(folder)
    w = Workspace.create(tmp_path / "ws")
    w.start_session("ln", task, "forward", proposer="human")
    w.start_session("lnb", task, "backward", proposer="human")
    yield w
    w.close()


def _passing(ws, cid, speedup=1.7):
    ws.record_verdicts(cid, [Verdict("compile", Status.PASS, "built in 7 s"),
                             Verdict("correctness", Status.PASS, "4/4 configs within 1e-05")])
    ws.record_measurement(cid, Measurement(speedup, 1.2, (ConfigTiming("bench", 0.1, 0.002, 0.1 * speedup, 0.12),),
                                           gpu="NVIDIA H200", driver="570.1", torch="2.9.0", cuda="12.8"))


def test_workspace_export_with_backward(ws, tmp_path):
    fwd = ws.commit_candidate("ln", load_candidate(LN_FWD), rationale="baseline").id
    bwd_bad = ws.commit_candidate("lnb", load_candidate(LN_BWD)).id
    ws.record_verdict(bwd_bad, Verdict("correctness", Status.FAIL, "grad_weight off"))
    with pytest.raises(ExportError, match="no correctness verdict"):
        plan_from_workspace(ws, fwd)
    _passing(ws, fwd)
    plan = plan_from_workspace(ws, fwd)
    assert plan.backward is None and any("no candidate" in n for n in plan.notes)
    bwd = ws.commit_candidate("lnb", load_candidate(LN_BWD), parents=[bwd_bad]).id
    _passing(ws, bwd, 1.3)
    plan = plan_from_workspace(ws, fwd[:6], name="ln_ext")  # a unique prefix resolves too
    assert plan.backward is not None and plan.backward.candidate_id == bwd
    out = tmp_path / "ln_ext"
    write_package(plan, out)
    meta = _check_package(out, "ln_ext")
    assert meta["kernels"]["forward"]["candidate"] == fwd and meta["kernels"]["backward"]["candidate"] == bwd
    assert meta["kernels"]["forward"]["commit"] == ws.resolve(fwd).commit
    readme = (out / "README.md").read_text()
    assert f"workspace candidate {fwd}" in readme and f"workspace candidate {bwd}" in readme
    assert "| correctness | pass | 4/4 configs within 1e-05 |" in readme
    assert "speedup 1.70x over eager PyTorch" in readme and "NVIDIA H200" in readme
    assert "| bench | 0.1 | 0.17 | 0.12 | 1.70x |" in readme
    assert "WARNING" not in readme
    # --no-backward, and an explicit --backward that is not passing needs --force
    assert plan_from_workspace(ws, fwd, with_backward=False).backward is None
    with pytest.raises(ExportError, match="backward kernel .* no passing verdict"):
        plan_from_workspace(ws, fwd, backward=bwd_bad)
    forced = plan_from_workspace(ws, fwd, backward=bwd_bad, force=True)
    assert forced.forced and "correctness fail" in forced.warnings[0]


def test_workspace_refuses_failed_candidate_unless_forced(ws, tmp_path):
    cid = ws.commit_candidate("ln", load_candidate(LN_FWD)).id
    ws.record_verdicts(cid, [Verdict("correctness", Status.PASS, "ok"), Verdict("integrity", Status.SUSPICIOUS, "too fast")])
    with pytest.raises(ExportError, match="integrity suspicious"):
        plan_from_workspace(ws, cid)
    plan = plan_from_workspace(ws, cid, force=True, with_backward=False)
    write_package(plan, tmp_path / "o")
    readme = (tmp_path / "o" / "README.md").read_text()
    assert "WARNING: exported with --force" in readme and "integrity suspicious" in readme
    assert "| integrity | suspicious | too fast |" in readme


def test_workspace_backward_candidate_is_not_a_forward(ws):
    bid = ws.commit_candidate("lnb", load_candidate(LN_BWD)).id
    with pytest.raises(ExportError, match="backward session"):
        plan_from_workspace(ws, bid, force=True)


# -------------------------------------------------------------------------------------------- CLI


def test_cli_export(ws, tmp_path, capsys):
    cid = ws.commit_candidate("ln", load_candidate(LN_FWD)).id
    wsp = str(ws.path)
    out = tmp_path / "cli"
    assert main(["export", cid, "--workspace", wsp, "--out", str(out)]) == 2
    assert "refusing to export" in capsys.readouterr().err and not out.exists()
    assert main(["export", cid, "--workspace", wsp, "--out", str(out), "--force"]) == 0
    captured = capsys.readouterr()
    assert "warning" in captured.err and "pip install --no-build-isolation" in captured.out
    assert (out / "src" / "kbench_layernorm" / "ops.py").is_file()
    assert main(["export", cid, "--workspace", wsp, "--out", str(out), "--force"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["export", cid, "--workspace", wsp, "--out", str(out), "--force", "--overwrite", "--name", "ln2"]) == 0
    assert (out / "src" / "ln2" / "ops.py").is_file() and not (out / "src" / "kbench_layernorm").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    assert main(["export", cid, "--workspace", wsp, "--out", str(other), "--force", "--overwrite"]) == 2
    assert "not a previous kbench export" in capsys.readouterr().err and (other / "keep.txt").exists()


def test_cli_from_dir(tmp_path, capsys):
    out = tmp_path / "sm"
    assert main(["export", "--from-dir", str(TASKS / "softmax" / "baselines" / "forward"), "--task", "softmax",
                 "--backward-dir", str(TASKS / "softmax" / "baselines" / "backward"), "--out", str(out)]) == 0
    assert "torch.ops.kbench_softmax.backward" in capsys.readouterr().out
    assert (out / "csrc" / "backward_op.cpp").is_file()
    assert main(["export", "--from-dir", str(out), "--out", str(tmp_path / "x")]) == 2
    assert "needs --task" in capsys.readouterr().err
    assert main(["export", "--out", str(tmp_path / "x")]) == 2
    assert main(["export", "--from-dir", "x", "--task", "softmax", "--name", "Bad-Name"]) == 2
    assert "try --name bad_name" in capsys.readouterr().err


# ------------------------------------------------------------------ the generated Python, without building

STUB_C = '''
"""Test stand-in for the compiled extension: defines the ops from export.json, with CPU kernels."""
import json
from pathlib import Path

import torch

from . import reference

META = json.loads(Path(__file__).with_name("export.json").read_text())
NS = META["namespace"]
lib = torch.library.Library(NS, "DEF")
for op in META["ops"].values():
    lib.define(op["schema"])
lib.impl("forward", lambda *args: reference.forward_fn(*args).contiguous().clone(), "CPU")
'''

LN_BACKWARD_CPU = '''
def _ln_backward(g, x, w, b, eps, normalized_shape):
    # robust-kbench's layernorm and its backward convention: normalized_shape (w's shape) after eps; each row
    # normalised over w's (C, H, W) dims, with elementwise w and b
    assert list(normalized_shape) == list(w.shape), normalized_shape
    dims = tuple(range(x.dim() - w.dim(), x.dim()))
    mean = x.mean(dims, keepdim=True)
    rstd = torch.rsqrt(x.var(dims, unbiased=False, keepdim=True) + eps)
    xhat = (x - mean) * rstd
    gw = g * w
    dx = rstd * (gw - gw.mean(dims, keepdim=True) - xhat * (gw * xhat).mean(dims, keepdim=True))
    rows = tuple(range(x.dim() - w.dim()))
    return [dx.contiguous(), (g * xhat).sum(rows), g.sum(rows)]
lib.impl("backward", _ln_backward, "CPU")
'''

DRIVE = '''
import torch
import kbench_layernorm as ln
import rb
from kbench_layernorm import reference as ln_ref
from rb import reference as rb_ref

# layernorm: forward + backward through register_fake / register_autograd, eager and compiled
torch.manual_seed(0)
ref = ln_ref.Model(num_features=3, dim1=5, dim2=7, init_method="random")
model = ln.KbenchLayernorm(num_features=3, dim1=5, dim2=7)
model.load_state_dict(ref.state_dict())
x = torch.randn(4, 3, 5, 7)
for m in (model, torch.compile(model, fullgraph=True)):
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    model.zero_grad(); ref.zero_grad()
    y = m(xa); y.backward(torch.ones_like(y))
    want = ref(xb); want.backward(torch.ones_like(want))
    torch.testing.assert_close(y, want)
    torch.testing.assert_close(xa.grad, xb.grad)
    torch.testing.assert_close(model.weight.grad, ref.weight.grad)
args = (x.clone().requires_grad_(True), ref.weight.detach().clone().requires_grad_(True),
        ref.bias.detach().clone().requires_grad_(True), 1)   # an int eps is cast to the schema's float
torch.library.opcheck(torch.ops.kbench_layernorm.forward.default, args)
# the backward op takes upstream's call, which backward_args builds from the gradient and the forward's arguments
plain = [x, ref.weight.detach(), ref.bias.detach(), 1e-5]
torch.library.opcheck(torch.ops.kbench_layernorm.backward.default,
                      tuple(ln.ops.backward_args(torch.randn(4, 3, 5, 7), plain)))
assert ln.ops.backward_args(y, plain)[4:] == [1e-5, [3, 5, 7]]

# resnet_block: optional tensors (None for the identity shortcut, tensors for the downsample) and an int
for kwargs in ({"in_channels": 4, "out_channels": 4, "stride": 1}, {"in_channels": 3, "out_channels": 5, "stride": 2}):
    torch.manual_seed(1)
    ref = rb_ref.Model(**kwargs).eval()
    model = rb.Rb(**kwargs).eval()
    model.load_state_dict(ref.state_dict())
    x = torch.randn(2, kwargs["in_channels"], 9, 9)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, fullgraph=True)(x), ref(x))
print("PYTHON-SIDE-OK")
'''


def test_generated_python_side_runs_without_a_build(tmp_path):
    """The package's Python (schemas, register_fake, register_autograd, drop-in Module) with stand-in CPU
    kernels in place of the compiled extension: eager, torch.compile(fullgraph=True) and opcheck."""
    write_package(plan_from_dirs(LN_FWD, "layernorm", LN_BWD), tmp_path / "ln")
    write_package(plan_from_dirs(TASKS / "resnet_block" / "baselines" / "forward", "resnet_block", name="rb"),
                  tmp_path / "rbpkg")
    (tmp_path / "ln" / "src" / "kbench_layernorm" / "_C.py").write_text(STUB_C + LN_BACKWARD_CPU)
    (tmp_path / "ln" / "src" / "kbench_layernorm" / "_C_backward.py").write_text("")
    (tmp_path / "rbpkg" / "src" / "rb" / "_C.py").write_text(STUB_C)
    path = f"{tmp_path / 'ln' / 'src'}:{tmp_path / 'rbpkg' / 'src'}"
    run = subprocess.run([sys.executable, "-c", DRIVE], capture_output=True, text=True, cwd=tmp_path,
                         # a cache of its own: a compiled graph cached for an op of the same name with another
                         # schema (an earlier export, another checkout) would be replayed
                         env={**os.environ, "PYTHONPATH": path, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")},
                         timeout=600)
    assert run.returncode == 0 and "PYTHON-SIDE-OK" in run.stdout, run.stdout[-3000:] + run.stderr[-5000:]
