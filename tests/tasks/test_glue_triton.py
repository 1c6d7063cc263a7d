"""Triton candidates meet their task (engine/tasks/glue/triton.py): every built-in task direction with generated
glue has a Triton launcher skeleton and a generated binding.py, both valid Python naming the launcher with the CUDA
launcher's parameters; the Triton form is recognised, materialised with its binding and refused where the
signature has no glue."""

from __future__ import annotations

import ast
import sys

import pytest

from engine.candidates import Candidate, detect_format, load_candidate
from engine.tasks.glue.generated import glue_triton_skeleton, load_for_task, materialise, refusal
from engine.tasks.glue.abi import GlueError, launcher_abi
from engine.tasks.glue.triton import binding_py_text, py_params
from engine.tasks.loader import builtin_task_names, load_task
from tests.paths import FIXTURES

FIXTURE = FIXTURES / "triton" / "llama_rmsnorm_forward"


def _glued() -> list[tuple[str, str]]:
    return [(name, d) for name in builtin_task_names() for d in load_task(name).directions
            if refusal(load_task(name), d) is None]


def _function(text: str, name: str) -> ast.FunctionDef:
    return next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)


def test_an_int_list_reaches_the_triton_launcher_as_a_tuple_and_its_count():
    """layernorm's backward gets normalized_shape as robust-kbench passes it (a tuple, or a list): the Python binding
    hands the launcher a tuple of ints and its count, after it, as the CUDA launcher gets a pointer and a count."""
    import torch
    from engine.tasks.glue.abi import abi_from_signature
    abi = abi_from_signature("backward(g: f32[B,N], x: f32[B,N], shape: tuple[int, ...]) -> (gx: f32[B,N])",
                             "backward")
    assert py_params(abi) == ["g", "x", "shape", "shape_len", "gx", "B", "N"]
    seen = []
    namespace = {"kb_backward": lambda *a: seen.append(a[2:4])}
    text = binding_py_text(abi, kernel_module="kernel").replace("from kernel import kb_backward", "")
    text = text.replace("with torch.cuda.device(kb_device):", "if True:").replace("not t.is_cuda", "False")
    exec(compile(text, "binding.py", "exec"), namespace)
    g = torch.randn(2, 3)
    for shape in ((2, 3), [2, 3]):
        namespace["backward"](g, g, shape)
    assert seen == [((2, 3), 2), ((2, 3), 2)]


@pytest.mark.parametrize("name, direction", _glued(), ids=lambda x: str(x))
def test_every_glued_builtin_direction_has_a_triton_skeleton_and_binding(name, direction):
    task = load_task(name)
    abi = launcher_abi(task, direction)
    skeleton = glue_triton_skeleton(task, direction)
    launcher = _function(skeleton, f"kb_{direction}")
    # the CUDA launcher's parameters in order, less the stream
    cuda = [p.split()[-1].lstrip("*") for p in abi.declaration().split("(", 1)[1].rsplit(")", 1)[0].split(",")]
    assert [a.arg for a in launcher.args.args] == py_params(abi) == cuda[:-1]
    binding = binding_py_text(abi)
    fn = _function(binding, direction)
    assert [a.arg for a in fn.args.args] == [p.cname for p in abi.inputs]
    imports = [n for n in ast.parse(binding).body if isinstance(n, ast.ImportFrom)]
    assert [(i.module, [a.name for a in i.names]) for i in imports] == [("kernel", [f"kb_{direction}"])]
    # the skeleton is a Triton candidate of its own, materialised with exactly this binding
    cand = materialise(Candidate(detect_format({"kernel.py": skeleton}), {"kernel.py": skeleton}), task, direction)
    assert cand.format == "triton" and cand.files["binding.py"] == binding


def test_the_binding_refuses_what_the_launcher_could_not_take():
    torch = pytest.importorskip("torch")
    task = load_task("llama_rmsnorm")
    namespace: dict = {}
    kernel = type("kernel", (), {"kb_forward": staticmethod(lambda *a: None)})
    sys.modules["kernel"] = kernel
    try:
        exec(compile(binding_py_text(launcher_abi(task, "forward")), "binding.py", "exec"), namespace)
    finally:
        sys.modules.pop("kernel")
    with pytest.raises(TypeError, match="forward: x must be a CUDA tensor"):
        namespace["forward"](torch.ones(2, 3, 4), torch.ones(4), 1e-6)


def test_a_folder_with_kernel_py_defining_the_launcher_is_a_triton_candidate(tmp_path):
    cand = load_candidate(FIXTURE)
    assert cand.format == "triton" and set(cand.files) == {"kernel.py"} and cand.main_file == "kernel.py"
    assert load_candidate(FIXTURE / "kernel.py").format == "triton"
    task = load_task("llama_rmsnorm")
    full = load_for_task(FIXTURE, task, "forward")
    assert full.files["binding.py"] == binding_py_text(launcher_abi(task, "forward"))
    assert full.meta["binding"] == "generated"
    # a launcher named only in a comment or a string is not a definition
    (tmp_path / "kernel.py").write_text('# def kb_forward(x):\nDOC = "def kb_forward"\n')
    with pytest.raises(Exception, match="cannot tell the candidate format|kernel.py"):
        load_candidate(tmp_path)


def test_a_signature_without_glue_refuses_the_triton_form_with_the_reason():
    task = load_task("unet_conv2d")
    cand = Candidate("triton", {"kernel.py": "def kb_forward(*a):\n    pass\n"})
    with pytest.raises(GlueError, match="Triton candidate .* cannot run on task unet_conv2d"):
        materialise(cand, task, "forward")
