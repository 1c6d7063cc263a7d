"""Kernel-only candidates (engine/tasks/glue/generated.py): a task signature as a launcher ABI and a generated
binding.cpp, the candidate form that needs only kernel.cu, and where it meets its task (eval, proposers, the LLM's
submit_kernel). The compile tests build the kernel-only llama_rmsnorm forward fixture twice and show binding.o coming
from the object cache the second time; the GPU test evaluates it on every config."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from engine.candidates import Candidate, detect_format, load_candidate
from engine.errors import CandidateError, KbenchError
from engine.tasks.glue.generated import glue_binding, glue_header, load_for_task, materialise, refusal
from engine.tasks.glue.abi import GlueError, abi_from_signature, launcher_abi
from engine.tasks.glue.text import binding_text
from engine.tasks.loader import builtin_task_names, load_task
from tests.paths import FIXTURES, LLM_FIXTURES, REPO

FIXTURE = FIXTURES / "kernel_only" / "llama_rmsnorm_forward"
# The built-in task directions whose signature the launcher ABI cannot express, and why (docs/formats.md lists them).
REFUSED = {("resnet_block", "forward"): "cannot be read off the required input tensors",
           ("unet_conv2d", "forward"): "cannot be read off the required input tensors",
           # robust-kbench hands its max-pool backward the saved tensors as one tuple
           ("mnist_pool", "backward"): "is a tuple or list other than of ints, which the launcher ABI has no way to "
                                       "pass"}


def _all_directions() -> list[tuple[str, str]]:
    return [(name, d) for name in builtin_task_names() for d in load_task(name).directions]


# ---------------------------------------------------------------------------- the ABI of every built-in signature
@pytest.mark.parametrize("name, direction", _all_directions(), ids=lambda x: str(x))
def test_every_builtin_signature_has_glue_or_a_named_reason(name, direction):
    task = load_task(name)
    why = refusal(task, direction)
    if (name, direction) in REFUSED:
        assert why is not None and REFUSED[(name, direction)] in why
        with pytest.raises(GlueError):
            glue_binding(task, direction)
        return
    assert why is None
    abi = launcher_abi(task, direction)
    header, binding = glue_header(task, direction), glue_binding(task, direction)
    assert abi.launcher == f"kb_{direction}" and abi.declaration() in header and abi.declaration() in binding
    assert binding == glue_binding(load_task(name), direction)           # deterministic
    assert name not in binding                                           # per signature, not per task
    assert "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)" in binding and f'm.def("{direction}", &{direction},' in binding
    assert "C10_CUDA_KERNEL_LAUNCH_CHECK();" in binding and "at::cuda::getCurrentCUDAStream()" in binding
    assert "const c10::cuda::CUDAGuard kb_guard(kb_device);" in binding
    # every argument, in the signature's order, by its name
    names = [p.name for p in abi.inputs]
    assert binding.count("py::arg(") == len(names)
    positions = [binding.index(f'py::arg("{n}")') for n in names]
    assert positions == sorted(positions)
    for p in abi.inputs:
        if p.kind == "tensor":
            assert f"{p.cname}.contiguous()" in binding and f'"{p.name}", "{p.annotation}"' in binding
    for p in abi.outputs:
        assert f"at::Tensor {p.cname} = at::empty(" in binding
    assert ("std::vector<at::Tensor> " if abi.returns_list else "at::Tensor ") + f"{direction}(" in binding
    assert abi.returns_list == (direction == "backward" or len(abi.outputs) > 1)


def test_which_builtin_directions_are_refused():
    refused = {(n, d) for n, d in _all_directions() if refusal(load_task(n), d) is not None}
    assert refused == set(REFUSED)


def test_the_llama_rmsnorm_launcher():
    task = load_task("llama_rmsnorm")
    abi = launcher_abi(task, "forward")
    assert abi.declaration() == ("void kb_forward(const float* x, const float* w, double eps, float* y, int64_t B, "
                                 "int64_t S, int64_t H,\n                cudaStream_t stream);")
    header = glue_header(task, "forward")
    assert header.startswith("// kbench launcher ABI (task llama_rmsnorm, forward)")
    assert "#pragma once" in header and "#include <cuda_runtime.h>" in header and 'extern "C"' in header
    binding = binding_text(abi)
    for line in ('kb_check_tensor(x, "x", "f32[B,S,H]", at::kFloat, 3, kb_device);',
                 "const int64_t B = x.size(0);", "const int64_t H = x.size(2);",
                 'kb_check_size(w, "w", "f32[H]", 0, H, "H");',
                 "at::Tensor y = at::empty({B, S, H}, at::TensorOptions().dtype(at::kFloat).device(kb_device));",
                 "kb_forward(x_c.data_ptr<float>(), w_c.data_ptr<float>(), eps, y.data_ptr<float>(), B, S, H,",
                 "return y;"):
        assert line in binding, line
    back = launcher_abi(task, "backward")
    assert [(p.name, p.annotation) for p in back.inputs] == [("grad_y", "f32[B,S,H]"), ("x", "f32[B,S,H]"),
                                                            ("w", "f32[H]"), ("eps", "float")]
    assert back.resolved == (("x", "f32[B,S,H]"), ("w", "f32[H]"), ("eps", "float"))
    assert "return {grad_x, grad_w};" in binding_text(back)


def test_one_signature_one_binding_whatever_the_task():
    """mnist_linear and mnist_linear_relu share a forward signature: one generated binding, so one binding.o."""
    a, b = load_task("mnist_linear"), load_task("mnist_linear_relu")
    assert a.spec("forward").signature == b.spec("forward").signature
    assert glue_binding(a, "forward") == glue_binding(b, "forward")
    assert glue_header(a, "forward") != glue_header(b, "forward")        # the header names its task


def test_dimensions_come_in_first_appearance_order_and_expressions_are_checked():
    # x, weights, biases (the forward's annotations), grad_y: f32[B,Co,(H-K+1)//2,(W-K+1)//2]
    abi = launcher_abi(load_task("mnist_conv_relu_pool"), "backward")
    assert [d for d, _ in abi.dims] == ["B", "Ci", "H", "W", "Co", "K"]
    binding = binding_text(abi)
    assert ('kb_check_size(grad_y, "grad_y", "f32[B,Co,(H-K+1)//2,(W-K+1)//2]", 2, kb_floordiv((H - K) + 1, 2), '
            '"(H-K+1)//2");') in binding
    assert "int64_t kb_floordiv(int64_t a, int64_t b)" in binding and "kb_mod" not in binding
    conv = binding_text(launcher_abi(load_task("mnist_conv_relu_pool"), "forward"))
    assert 'kb_size(kb_floordiv((H - K) + 1, 2), "y", "f32[B,Co,(H-K+1)//2,(W-K+1)//2]", "(H-K+1)//2")' in conv


def test_a_zero_dim_output_and_an_integer_input():
    abi = launcher_abi(load_task("mnist_cross_entropy"), "forward")
    assert "const int64_t* targets" in abi.declaration() and "float* loss" in abi.declaration()
    binding = binding_text(abi)
    assert "at::Tensor loss = at::empty(at::IntArrayRef()," in binding
    assert 'kb_check_tensor(targets, "targets", "i64[B]", at::kLong, 1, kb_device);' in binding


def test_int_arguments_may_size_an_output():
    """What unet_conv2d would need: its output size as an expression of input dimensions and int arguments."""
    sig = ("forward(x: f32[B,Ci,H,W], w: f32[Co,Ci,K,K], stride: int, padding: int) "
           "-> y: f32[B,Co,(H+2*padding-K)//stride+1,(W+2*padding-K)//stride+1]")
    abi = abi_from_signature(sig, "forward")
    assert [d for d, _ in abi.dims] == ["B", "Ci", "H", "W", "Co", "K"]
    assert "int64_t stride, int64_t padding, float* y" in abi.declaration().replace("\n", " ").replace("  ", "")
    assert "kb_floordiv((H + (2 * padding)) - K, stride) + 1" in binding_text(abi)


def test_an_int_argument_as_a_dimension():
    abi = abi_from_signature("forward(x: f32[N], idx: i64[k], k: int) -> (v: f32[k], i: i64[k])", "forward")
    assert [d for d, _ in abi.dims] == ["N"] and "int64_t k, float* v, int64_t* i, int64_t N" in abi.declaration()
    binding = binding_text(abi)
    assert 'kb_check_size(idx, "idx", "i64[k]", 0, k, "k");' in binding
    assert 'at::Tensor v = at::empty({kb_size(k, "v", "f32[k]", "k")}' in binding


def test_every_dtype_optional_tensors_and_names_that_clash():
    sig = ("forward(x: f16[B,N], idx: i64[B], mask: bool[N], bias: f32[N] | None, scale: float, k: int, "
           "flag: bool, new: u8[3], stream: i32[N], kb_x: bf16[B]) -> (y: bf16[B,N], s: f32[], x: f64[N % 7 + k])")
    abi = abi_from_signature(sig, "forward")
    decl = " ".join(abi.declaration().split())
    assert decl == ("void kb_forward(const __half* x, const int64_t* idx, const bool* mask, const float* bias, "
                    "double scale, int64_t k, bool flag, const uint8_t* new_, const int32_t* stream_, "
                    "const __nv_bfloat16* akb_x, __nv_bfloat16* y, float* s, double* x_, int64_t B, int64_t N, "
                    "cudaStream_t stream);")
    binding = binding_text(abi)
    assert "#include <cuda_fp16.h>" in binding and "#include <cuda_bf16.h>" in binding
    assert "reinterpret_cast<const __half*>(x_c.data_ptr<at::Half>())" in binding
    assert "bias_c.defined() ? bias_c.data_ptr<float>() : nullptr" in binding
    assert "if (bias.has_value()) {" in binding and "const c10::optional<at::Tensor>& bias" in binding
    assert 'py::arg("new")' in binding and 'py::arg("stream")' in binding and "kb_mod(N, 7) + k" in binding
    assert "std::vector<at::Tensor> forward(" in binding and "return {y, s, x_};" in binding


@pytest.mark.parametrize("sig, words", [
    ("forward(x: torch.Tensor) -> torch.Tensor", ["`x: torch.Tensor`", "without dtype and shape"]),
    ("forward(x: f32[N], eps: float | None) -> y: f32[N]", ["optional scalar"]),
    ("forward(x: f32[N]) -> float", ["is a scalar", "f32[]"]),
    ("forward(x: f32[N])", ["declares no output"]),
    ("forward(x: f32[N]) -> (a, b)", ["output `a`", "no annotation"]),
    ("forward(x: f32[N]) -> y: f32[M]", ["dimension `M`", "output", "no input tensor has it"]),
    ("forward(x: f32[N], b: f32[M] | None) -> y: f32[N]", ["dimension `M`", "optional input"]),
    ("forward(x: f32[N//2]) -> y: f32[N]", ["dimension `N`", "only inside expressions"]),
    ("forward(x: c64[N]) -> y: c64[N]", ["dtype c64"]),
    ("forward(x: f32[N/2]) -> y: f32[N]", ["not an integer expression"]),
    ("forward(x) -> y: f32[N]", ["`x`", "no annotation"]),
    ("forward(x: f32[N], n: float) -> y: f32[n]", ["dimension `n`", "int argument"]),
    ("forward(x: f32[N] | None) -> y: f32[N]", ["no required tensor"]),
    ("forward(x: str) -> y: f32[1]", ["a type the launcher ABI has no way to pass"]),
    ("forward(x: f32[N], s: tuple[float, ...]) -> y: f32[N]", ["tuple or list other than of ints"]),
    ("forward(x: f32[N], s: list[int] | None) -> y: f32[N]", ["an optional list"]),
])
def test_what_cannot_be_expressed_is_named(sig, words):
    with pytest.raises(GlueError) as err:
        abi_from_signature(sig, "forward")
    for w in words:
        assert w in str(err.value), str(err.value)


# the built-in layernorm's signatures (robust-kbench's backward convention: normalized_shape after eps)
LN_FORWARD = "forward(x: f32[B,C,H,W], weight: f32[C,H,W], bias: f32[C,H,W], eps: float) -> y: f32[B,C,H,W]"
LN_BACKWARD = ("backward(grad_y: f32[B,C,H,W], x, weight, bias, eps, normalized_shape: tuple[int, ...]) -> "
               "(grad_x: f32[B,C,H,W], grad_weight: f32[C,H,W], grad_bias: f32[C,H,W])")


def test_an_int_list_reaches_the_launcher_as_a_pointer_and_a_count():
    """robust-kbench's layernorm backward passes normalized_shape, a Python tuple of ints, after eps: the binding
    takes it as a std::vector<int64_t> (pybind converts a tuple or list), the launcher gets its values and count."""
    abi = abi_from_signature(LN_BACKWARD, "backward", LN_FORWARD)
    assert "double eps, const int64_t* normalized_shape, int64_t normalized_shape_len, float* grad_x" in \
        " ".join(abi.declaration().split())
    text = binding_text(abi)
    assert "const std::vector<int64_t>& normalized_shape" in text
    assert "normalized_shape.data(), static_cast<int64_t>(normalized_shape.size())" in " ".join(text.split())
    assert 'py::arg("eps"), py::arg("normalized_shape")' in " ".join(text.split())


@pytest.mark.slow
def test_the_generated_layernorm_backward_binding_takes_upstreams_call(toolchain, native_cache_root):
    """Built with a stub launcher and called as robust-kbench's harness calls a layernorm backward kernel
    (grad_output, x, weight, bias, eps, normalized_shape as a tuple or a list) on CPU tensors: the binding's own
    CUDA check stops it, not pybind's argument matching; without normalized_shape pybind refuses the call."""
    from engine.harness.build.stage import build_candidate
    abi = abi_from_signature(LN_BACKWARD, "backward", LN_FORWARD)
    stub = f"#include <cstdint>\n#include <cuda_runtime.h>\n{abi.declaration()[:-1]} {{}}\n"
    res = build_candidate(Candidate("native", {"kernel.cu": stub, "binding.cpp": binding_text(abi)}, "ln-bwd-glue"),
                          native_cache_root, toolchain)
    assert res.ok, f"{res.error}\n{res.log}"
    code = ("import json, sys, torch\nfrom engine.harness.build.stage import BuildResult, load_module\n"
            "m = load_module(BuildResult.from_json(json.loads(sys.argv[1])))\n"
            "g, x, w, b = torch.randn(2, 3, 5, 7), torch.randn(2, 3, 5, 7), torch.randn(3, 5, 7), torch.randn(3, 5, 7)\n"
            "for args in ((g, x, w, b, 1e-5, (3, 5, 7)), (g, x, w, b, 1e-5, [3, 5, 7]), (g, x, w, b, 1e-5)):\n"
            "    try:\n        m.backward(*args)\n    except Exception as e:\n"
            "        print(type(e).__name__, str(e).splitlines()[0])\n")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(res.to_json())], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 3, proc.stdout
    assert all(line.startswith("RuntimeError") and "must be a CUDA tensor" in line for line in lines[:2]), lines
    assert lines[2].startswith("TypeError") and "incompatible function arguments" in lines[2], lines


def test_a_backward_argument_the_forward_does_not_have():
    with pytest.raises(GlueError, match="the forward signature has no argument of that name"):
        abi_from_signature("backward(grad: f32[N], z) -> (gx: f32[N])", "backward", "forward(x: f32[N]) -> f32[N]")


# ---------------------------------------------------------------------------- the candidate form
def test_loading_a_kernel_only_candidate(tmp_path):
    c = load_candidate(FIXTURE)
    assert c.format == "kernel-only" and set(c.files) == {"kernel.cu"} and c.main_file == "kernel.cu"
    assert load_candidate(FIXTURE / "kernel.cu").files == c.files       # the file or its folder
    (tmp_path / "kernel.cu").write_text(c.files["kernel.cu"])
    (tmp_path / "tiles.cuh").write_text("#pragma once\n")
    (tmp_path / "notes.txt").write_text("not a source file")
    got = load_candidate(tmp_path / "kernel.cu")
    assert got.format == "kernel-only" and set(got.files) == {"kernel.cu", "tiles.cuh"}
    launcher = "void kb_forward(const float* x, float* y, int64_t N, cudaStream_t stream) {}\n"
    assert detect_format({"kernel.cu": launcher}) == "kernel-only"
    assert detect_format({"kernel.cu": launcher, "a.cuh": "y"}) == "kernel-only"
    for files in ({"kernel.cu": launcher, "other.cu": "y"}, {"kernel.cu": "__global__ void k() {}"}):
        with pytest.raises(CandidateError, match="kernel-only"):
            detect_format(files)
    (tmp_path / "kernel.cu").write_text("__global__ void k() {}\n")         # no launcher: a native folder short
    with pytest.raises(CandidateError, match="missing binding.cpp"):       # of its binding, as before
        load_candidate(tmp_path)


def test_the_other_forms_load_as_before(tmp_path):
    native = load_candidate(REPO / "tasks" / "llama_rmsnorm" / "baselines" / "forward")
    assert native.format == "native" and "binding.cpp" in native.files
    rkb = tmp_path / "rkb"
    rkb.mkdir()
    (rkb / "kernel.cu").write_text("#include <torch/extension.h>\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n")
    assert load_candidate(rkb).format == "robust-kbench" and load_candidate(rkb / "kernel.cu").format == "robust-kbench"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CandidateError, match="missing kernel.cu, binding.cpp"):
        load_candidate(empty)


def test_materialise_makes_an_ordinary_native_candidate():
    task = load_task("llama_rmsnorm")
    ko = load_candidate(FIXTURE)
    native = materialise(ko, task, "forward")
    assert native.format == "native" and native.files["kernel.cu"] == ko.files["kernel.cu"]
    assert native.files["binding.cpp"] == glue_binding(task, "forward") and native.meta["binding"] == "generated"
    assert native.source_hash == materialise(load_candidate(FIXTURE), task, "forward").source_hash
    assert materialise(native, task, "forward") is native                # anything else goes through unchanged
    assert load_for_task(FIXTURE, task, "forward") == native
    with pytest.raises(GlueError, match="cannot run on task unet_conv2d .forward.: dimension `Ho`"):
        materialise(ko, load_task("unet_conv2d"), "forward")


def test_a_kernel_only_folder_exports_with_its_generated_binding():
    from engine.export.plan import plan_from_dirs
    plan = plan_from_dirs(FIXTURE, "llama_rmsnorm", force=True)
    assert plan.forward.candidate.files["binding.cpp"] == glue_binding(load_task("llama_rmsnorm"), "forward")
    assert plan.forward_schema.text == "forward(Tensor x, Tensor w, float eps) -> Tensor"


def test_the_generated_bindings_pass_the_static_integrity_scan():
    from engine.integrity.static import check_candidate
    for name, direction in _all_directions():
        task = load_task(name)
        if refusal(task, direction):
            continue
        decl = launcher_abi(task, direction).declaration()
        kernel = f"__global__ void k() {{}}\n{decl[:-1]} {{ k<<<1, 1, 0, stream>>>(); }}\n"
        cand = materialise(Candidate("kernel-only", {"kernel.cu": kernel}), task, direction)
        v = check_candidate(cand, task, "pure")
        assert v.status.value == "pass", (name, direction, v.reason)


def test_build_candidate_refuses_an_unmaterialised_kernel_only_candidate(tmp_path):
    from engine.harness.build.stage import build_candidate
    res = build_candidate(load_candidate(FIXTURE), tmp_path, _fake_toolchain())
    assert not res.ok and res.failure == "invalid" and "materialise" in res.error


def _fake_toolchain():
    from engine.harness.toolchain import Toolchain
    return Toolchain(cuda_home="/nowhere", nvcc="/nowhere/nvcc", nvcc_version="0", cxx="/nowhere/g++", cxx_version="0",
                     cxx_is_gcc=True, torch_version="0", cuda_version="0", python_include="/nowhere",
                     ext_suffix=".so", include_dirs=(), library_dirs=(), defines=(), cxx_std="c++17", archs=("9.0",))


def test_the_background_warm_up_never_builds_the_precompiled_header(tmp_path):
    from engine.harness.glue_warm import prebuild_glue, warm_glue_in_background
    task = load_task("llama_rmsnorm")
    got = prebuild_glue(task, "forward", tmp_path, _fake_toolchain(), build_pch=False)
    assert got.status == "no-pch" and not (tmp_path / "pch").exists() and not (tmp_path / "objects").exists()
    assert prebuild_glue(load_task("resnet_block"), "forward", tmp_path, _fake_toolchain()).status == "refused"
    assert warm_glue_in_background(load_task("resnet_block"), "forward", tmp_path) is None
    assert warm_glue_in_background(task, "backward", tmp_path) is not None


def test_evaluate_refuses_kernel_only_where_the_task_has_no_glue(tmp_path):
    from engine.pipeline.eval_types import EvalOptions
    from engine.pipeline.evaluate import evaluate
    rep = evaluate(load_task("unet_conv2d"), load_candidate(FIXTURE), "forward", EvalOptions(cache_root=tmp_path))
    v = rep.verdict("compile")
    assert not rep.passed and v.status.value == "fail" and "dimension `Ho`" in v.reason


# ---------------------------------------------------------------------------- proposers and the LLM
class _Hand:
    name, operators = "hand", frozenset({"translate", "mutate"})

    def __init__(self, candidate):
        self.candidate = candidate

    def available(self):
        return True

    def unavailable_reason(self):
        return ""

    def propose(self, request):
        from engine.proposers.base import Proposal, ProposalStatus
        return Proposal(ProposalStatus.OK, self.name, request.operator, candidate=self.candidate)


def test_a_proposer_s_kernel_only_candidate_is_committed_with_its_binding():
    from engine.proposers.base import ProposalRequest, ProposalStatus, guarded
    task = load_task("llama_rmsnorm")
    ko = load_candidate(FIXTURE)
    p = guarded(_Hand(ko), ProposalRequest(task=task, operator="translate"))
    assert p.status == ProposalStatus.OK and p.candidate.format == "native"
    assert p.candidate.files["binding.cpp"] == glue_binding(task, "forward")
    again = guarded(_Hand(ko), ProposalRequest(task=task, operator="translate",
                                               known_hashes=frozenset({p.candidate.source_hash})))
    assert again.status == ProposalStatus.FAILED and "repeats" in again.reason
    refused = guarded(_Hand(ko), ProposalRequest(task=load_task("resnet_block"), operator="translate"))
    assert refused.status == ProposalStatus.FAILED and "dimension `Ho`" in refused.reason and refused.candidate is None


sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import api, harness, layernorm, recorded, reply_from  # noqa: E402,F401

LN_KERNEL = """#include <cuda_runtime.h>
__global__ void ln(const float* x, float* y, int64_t n) { }
void kb_forward(const float* x, const float* weight, const float* bias, double eps, float* y, int64_t B, int64_t N,
                cudaStream_t stream) {
    ln<<<1, 1, 0, stream>>>(x, y, B * N);
}
"""


def test_submit_kernel_takes_kernel_cu_alone():
    from engine.llm.errors import AnswerError
    from engine.llm.tools import SUBMIT_KERNEL, kernel_answer
    assert SUBMIT_KERNEL["input_schema"]["required"] == ["name", "rationale", "kernel_cu"]
    base = reply_from("ok_translate")
    alone = {k: v for k, v in base.tool_input.items() if k != "binding_cpp"}
    ans = kernel_answer(replace(base, tool_input={**alone, "kernel_cu": LN_KERNEL}))
    assert ans.files == {"kernel.cu": LN_KERNEL}
    with pytest.raises(AnswerError, match="must define the launcher kb_backward"):
        kernel_answer(replace(base, tool_input={**alone, "kernel_cu": LN_KERNEL}), direction="backward")
    with pytest.raises(AnswerError, match="PYBIND11_MODULE but no binding_cpp"):
        kernel_answer(replace(base, tool_input={**alone, "kernel_cu": LN_KERNEL + "PYBIND11_MODULE(x, m) {}\n"}))


def test_the_task_context_declares_the_launcher(layernorm):
    from engine.llm import render
    from engine.llm.prompts import load_template
    ctx = load_template("context").render(render.context_values(layernorm, "forward"))
    assert "## Kernel-only answers" in ctx and launcher_abi(layernorm, "forward").declaration() in ctx
    assert render.context_values(load_task("unet_conv2d"), "forward")["launcher_abi"] == ""
    assert "## Kernel-only answers" not in load_template("context").render(
        render.context_values(load_task("unet_conv2d"), "forward"))


def test_the_llm_proposer_materialises_a_kernel_only_answer(harness, layernorm):
    from engine.proposers import ProposalRequest, ProposalStatus
    from engine.proposers.anthropic import AnthropicProposer
    cfg = harness.config()
    proposer = AnthropicProposer(harness.client(cfg), cfg)
    resp = recorded("ok_translate")
    body = json.loads(json.dumps(resp.body))
    tool = next(c for c in body["content"] if c["type"] == "tool_use")
    tool["input"] = {k: v for k, v in tool["input"].items() if k != "binding_cpp"} | {"kernel_cu": LN_KERNEL}
    harness.api.queue(replace(resp, body=body))
    p = proposer.propose(ProposalRequest(task=layernorm, operator="translate"))
    assert p.status == ProposalStatus.OK, p.reason
    c = p.candidate
    assert c.format == "native" and c.files == {"kernel.cu": LN_KERNEL, "binding.cpp": glue_binding(layernorm, "forward")}
    assert proposer.client.ledger.for_key(c.source_hash).calls == 1
    sent = harness.api.messages()[0].json
    assert "kb_forward" in sent["messages"][0]["content"][0]["text"]
    assert sent["tools"][0]["input_schema"]["required"] == ["name", "rationale", "kernel_cu"]


# ---------------------------------------------------------------------------- CLI
def _kbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_kbench_glue_prints_the_header_and_the_binding():
    out = _kbench("glue", "llama_rmsnorm")
    assert out.returncode == 0, out.stderr
    assert out.stdout == glue_header(load_task("llama_rmsnorm"), "forward")
    back = _kbench("glue", "llama_rmsnorm", "--backward", "--binding")
    assert back.returncode == 0 and back.stdout == glue_binding(load_task("llama_rmsnorm"), "backward")
    js = json.loads(_kbench("glue", "softmax", "--direction", "backward", "--json").stdout)
    assert js["launcher"] == "kb_backward" and js["dims"] == ["R", "C"] and "PYBIND11_MODULE" in js["binding"]
    refused = _kbench("glue", "unet_conv2d")
    assert refused.returncode == 2 and "kbench: error:" in refused.stderr and "dimension `Ho`" in refused.stderr
    listing = _kbench("glue", "all")
    assert listing.returncode == 0 and "unet_conv2d forward" in listing.stdout and "refused:" in listing.stdout


def test_kbench_glue_bad_input():
    missing = _kbench("glue", "sdpa", "--backward")
    assert missing.returncode == 2 and "no backward direction" in missing.stderr


# ---------------------------------------------------------------------------- real compiles (slow)
# conftest's `toolchain` (session): the same key as tests/harness/test_build.py, one precompiled header per session
def _import(res) -> str:
    code = ("import json, sys\nfrom engine.harness.build.stage import BuildResult, load_module\n"
            "m = load_module(BuildResult.from_json(json.loads(sys.argv[1])))\nprint(m.__name__, m.forward.__doc__)\n")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(res.to_json())], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_a_kernel_only_candidate_builds_and_the_next_reuses_the_glue_object(toolchain, native_cache_root):
    from engine.harness.build.stage import build_candidate
    task = load_task("llama_rmsnorm")
    first = materialise(load_candidate(FIXTURE), task, "forward")
    t0 = time.monotonic()
    res = build_candidate(first, native_cache_root, toolchain)
    first_s = time.monotonic() - t0
    assert res.ok, f"{res.error}\n{res.log}"
    assert not res.cache_hit and "nvcc" in res.steps and res.module_name == f"kb_{first.source_hash}"
    text = _import(res)
    assert text.startswith(res.module_name) and "(kbench generated glue)" in text and "y: f32[B,S,H]" in text

    # the next candidate: another kernel.cu (a knob changed), the same generated binding.cpp
    mutated = replace(load_candidate(FIXTURE), files={"kernel.cu": load_candidate(FIXTURE).files["kernel.cu"]
                                                      .replace("#define BLOCK_SIZE 256", "#define BLOCK_SIZE 512")})
    second = materialise(mutated, task, "forward")
    assert second.source_hash != first.source_hash and second.files["binding.cpp"] == first.files["binding.cpp"]
    t0 = time.monotonic()
    res2 = build_candidate(second, native_cache_root, toolchain)
    second_s = time.monotonic() - t0
    assert res2.ok, f"{res2.error}\n{res2.log}"
    from engine.harness.build.result import BuildSummary
    summary = BuildSummary.of(res2)
    assert summary.steps["cxx (cached object)"] == 0.0 and "cxx" not in summary.steps and summary.steps["nvcc"] > 0
    assert "g++ binding.cpp (cached object)" in summary.log and "binding.o compiled earlier" in summary.log
    _import(res2)
    print(f"\nkernel-only llama_rmsnorm forward: first build {first_s:.1f} s {res.steps}; "
          f"second (kernel.cu changed) {second_s:.1f} s {res2.steps}")


@pytest.mark.slow
def test_prebuilt_glue_serves_the_first_candidate_and_every_dtype_compiles(toolchain, native_cache_root):
    """One g++ run covers the generated binding's every path (f16/bf16/integer/bool tensors, an optional tensor, a
    0-dim output, dimension expressions, clashing names); prebuild_binding puts it in the object cache, and the
    first candidate's build takes it from there."""
    from engine.harness.build.stage import build_candidate
    from engine.harness.build.native import prebuild_binding
    sig = ("forward(x: f16[B,N], idx: i64[B], mask: bool[N], bias: f32[N] | None, scale: float, k: int, flag: bool, "
           "half: bf16[(B+1)//2, N % 7 + k], new: u8[3]) -> (y: bf16[B,N], s: f32[], z: i32[2*B-1])")
    abi = abi_from_signature(sig, "forward")
    status, detail = prebuild_binding(binding_text(abi), native_cache_root, toolchain)
    assert status == "compiled", detail
    assert prebuild_binding(binding_text(abi), native_cache_root, toolchain)[0] == "cached"
    stub = f"#include <cstdint>\n#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" \
           f"__global__ void stub() {{}}\n{abi.declaration()[:-1]} {{ stub<<<1, 1, 0, stream>>>(); }}\n"
    cand = Candidate("native", {"kernel.cu": stub, "binding.cpp": binding_text(abi)}, "glue-kitchen-sink")
    t0 = time.monotonic()
    res = build_candidate(cand, native_cache_root, toolchain)
    assert res.ok, f"{res.error}\n{res.log}"
    assert "cxx (cached object)" in res.steps and "cxx" not in res.steps
    print(f"\nfirst candidate after the glue prebuild: {time.monotonic() - t0:.1f} s {res.steps}")
    assert "(kbench generated glue)" in _import(res)


@pytest.mark.slow
def test_prebuild_glue_of_a_task(toolchain, native_cache_root):
    from engine.harness.glue_warm import prebuild_glue
    assert prebuild_glue(load_task("unet_conv2d"), "forward", native_cache_root, toolchain).status == "refused"
    task = load_task("llama_rmsnorm")
    first = prebuild_glue(task, "forward", native_cache_root, toolchain)
    assert first.status in ("compiled", "cached"), first.detail   # cached: the build test above ran first
    assert prebuild_glue(task, "forward", native_cache_root, toolchain).status == "cached"


# ---------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
@pytest.mark.slow
def test_the_kernel_only_candidate_passes_every_config(tmp_path):
    from engine.pipeline.eval_types import EvalOptions
    from engine.pipeline.evaluate import evaluate
    task = load_task("llama_rmsnorm")
    rep = evaluate(task, load_candidate(FIXTURE), "forward",
                   EvalOptions(timing=False, profile=False, baselines=("eager",)))
    assert rep.format == "native" and rep.candidate == materialise(load_candidate(FIXTURE), task, "forward").source_hash
    assert rep.verdict("compile").status.value == "pass", rep.verdict("compile").reason
    assert rep.verdict("correctness").status.value == "pass", rep.verdict("correctness").reason
    assert {r.name for r in rep.rows} == {c.name for c in task.configs} and all(r.correct for r in rep.rows)
    assert rep.passed


def test_glue_errors_are_bad_input():
    assert issubclass(GlueError, KbenchError)
