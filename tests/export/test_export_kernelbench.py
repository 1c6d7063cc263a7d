"""Exporting a KernelBench ModelNew (engine/export/kernelbench.py), without building it: the load_inline sources
are the files torch's own load_inline writes (recorded by a jailed import that compiles nothing), the candidate's
file ships byte for byte, and what a package cannot carry is refused with the reason. The package is built and its
tests run in tests/acceptance/test_export_readme.py."""

from __future__ import annotations

import hashlib
import json
import textwrap

import pytest

from engine.export import ExportError, package_files, plan_from_dirs
from engine.export.kernelbench import KernelBenchPlan
from tests.paths import FIXTURES

KB = FIXTURES / "kernelbench"
CANDIDATE = KB / "candidates" / "scaled_swish_correct.py"
PROBLEM = KB / "scaled_swish.py"


def test_a_modelnew_exports_with_the_sources_torch_writes(tmp_path):
    plan = plan_from_dirs(CANDIDATE, PROBLEM, force=True)
    assert isinstance(plan, KernelBenchPlan) and plan.name == "kbench_scaled_swish" and plan.forced
    assert plan.archs == ("9.0+PTX",)
    files = package_files(plan)
    ns = "src/kbench_scaled_swish"
    assert files[f"{ns}/model_new.py"] == CANDIDATE.read_text()
    assert files[f"{ns}/reference.py"] == PROBLEM.read_text()
    main, cuda = files["csrc/ext0/main.cpp"], files["csrc/ext0/cuda.cu"]
    # torch's load_inline: its implicit include, the C++ declarations, the pybind module it generates for `functions`
    assert main.startswith("#include <torch/extension.h>\ntorch::Tensor scaled_swish(torch::Tensor x, double scale);")
    assert 'm.def("scaled_swish", torch::wrap_pybind_function(scaled_swish), "scaled_swish");' in main
    assert cuda.startswith("#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n")
    assert "__global__ void scaled_swish_kernel" in cuda
    meta = json.loads(files[f"{ns}/export.json"])
    ext = meta["extensions"][0]
    assert ext["name"] == "kbench_fixture_scaled_swish_correct" and ext["module"] == "ext0"
    assert ext["functions"] == ["scaled_swish"]
    assert ext["sha256"] == {"cuda.cu": hashlib.sha256(cuda.encode()).hexdigest(),
                             "main.cpp": hashlib.sha256(main.encode()).hexdigest()}
    assert meta["task_format"] == "kernelbench" and meta["dtype"] == "float32" and meta["forced"]
    assert meta["tolerance"]["forward"]["atol"] == 1e-4 and len(meta["configs"]) >= 3
    assert "('ext0', ['csrc/ext0/cuda.cu', 'csrc/ext0/main.cpp'], [], ['-O3'], [])" in files["setup.py"]
    readme = files["README.md"]
    assert "WARNING: exported with --force" in readme and "<!-- install-and-test -->" in readme
    assert "| `kbench_scaled_swish.ext0` | `kbench_fixture_scaled_swish_correct` | scaled_swish |" in readme
    assert "ModelNew = load_model_new()" in files[f"{ns}/__init__.py"]


def test_a_modelnew_without_a_gpu_verdict_needs_force():
    with pytest.raises(ExportError, match="no passing verdict.*--force"):
        plan_from_dirs(CANDIDATE, PROBLEM)


def _modelnew(tmp_path, body: str):
    path = tmp_path / "model_new.py"
    path.write_text(textwrap.dedent('''
        import torch
        from torch.utils.cpp_extension import load, load_inline
        ''') + textwrap.dedent(body) + textwrap.dedent('''
        class ModelNew(torch.nn.Module):
            def __init__(self, scale):
                super().__init__()
            def forward(self, x):
                return x
        '''))
    return path


@pytest.mark.parametrize(("body", "why"), [
    ('ext = load(name="from_files", sources=["kernel.cu"])\n', "builds 'from_files' with torch.utils.cpp_extension.load"),
    ('ext = load_inline(name="inc", cpp_sources="int f();", extra_include_paths=["/opt/mine"])\n',
     "adds include paths of this machine"),
    ('raise ImportError("no such thing")\n', "raised on import"),
    ("", "builds no kernel with load_inline"),
])
def test_what_a_package_cannot_carry_is_refused(tmp_path, body, why):
    with pytest.raises(ExportError, match=why):
        plan_from_dirs(_modelnew(tmp_path, body), PROBLEM, force=True)


def test_a_kernelbench_problem_has_no_backward(tmp_path):
    with pytest.raises(ExportError, match="forward only"):
        plan_from_dirs(CANDIDATE, PROBLEM, backward_dir=CANDIDATE, force=True)
