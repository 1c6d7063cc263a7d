"""What an exported package builds for and against, without building it: the CUDA toolkit it finds (the same
function as kbench's), the GPUs (chosen at export, PTX for the newest), the torch it pins, the stripped release
flags, and the dtype checks its fake implementation copies from the kernel's binding."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import stat

import pytest

from engine.export import package_files, plan_from_dirs
from engine.export.dtypes import dtype_checks
from engine.export.errors import ExportError
from engine.export.schema import find_entry
from engine.export.targets import export_archs, torch_version
from engine.cuda_home import find_cuda_home
from tests.paths import REPO

TASKS = REPO / "tasks"


def _toolkit(root):
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "include" / "cuda_runtime_api.h").write_text("")
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho '#$ TOP={root}/bin/..' >&2\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    return root


def test_find_cuda_home_order_and_a_wrapper_nvcc_on_path(tmp_path):
    real = _toolkit(tmp_path / "cuda-13.0")
    wrappers = tmp_path / "local" / "bin"        # /usr/local/bin/nvcc that execs the toolkit's: torch guesses /usr/local
    wrappers.mkdir(parents=True)
    (wrappers / "nvcc").write_text(f'#!/bin/sh\nexec {real}/bin/nvcc "$@"\n')
    (wrappers / "nvcc").chmod(0o755)
    assert find_cuda_home({"CUDA_HOME": "/given", "CUDA_PATH": "/other", "PATH": str(wrappers)}) == ("/given", "$CUDA_HOME")
    assert find_cuda_home({"CUDA_PATH": "/other", "PATH": str(wrappers)})[0] == "/other"
    home, how = find_cuda_home({"PATH": str(wrappers)})
    assert home == str(real) and str(wrappers / "nvcc") in how
    os.symlink(real / "bin" / "nvcc", tmp_path / "nvcc-link")                # a link: resolved
    (tmp_path / "linkdir").mkdir()
    os.replace(tmp_path / "nvcc-link", tmp_path / "linkdir" / "nvcc")
    assert find_cuda_home({"PATH": str(tmp_path / "linkdir")})[0] == str(real)


def test_the_package_finds_cuda_with_kbenchs_own_function(tmp_path):
    files = package_files(plan_from_dirs(TASKS / "softmax" / "baselines" / "forward", "softmax"))
    setup = files["setup.py"]
    module = ast.parse(setup)
    find = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "find_cuda_home")
    source = (REPO / "engine" / "cuda_home.py").read_text()
    assert ast.get_source_segment(setup, find) in source
    # CUDA_HOME is set before torch.utils.cpp_extension is imported (torch reads it once, at import)
    assert setup.index('os.environ["CUDA_HOME"] = CUDA_HOME') < setup.index("from torch.utils import cpp_extension")
    assert "import torch.utils.cpp_extension" not in setup.split('os.environ["CUDA_HOME"]')[0]
    # release build: stripped, no debug info; the torch it was built against pinned
    assert '["-s"]' in setup and '"-g0"' in setup
    assert 'install_requires=[f"torch=={TORCH}"]' in setup
    assert f'VERIFIED_WITH_TORCH = "{torch_version()}"' in setup
    readme = files["README.md"]
    block = readme.split("<!-- install-and-test -->\n```bash\n", 1)[1].split("```", 1)[0]
    assert block.splitlines() == [
        f'python -m pip install "torch=={torch_version()}" "setuptools>=70.1" "ninja" "pytest"',
        "python -m pip install --no-build-isolation .",
        "python -m pytest tests"]
    assert "CUDA_HOME=/path/to/cuda" in readme and "TORCH_CUDA_ARCH_LIST" in readme and "DEBUG=1" in readme
    assert f'"torch=={torch_version()}"' in files["pyproject.toml"]


def test_export_archs_by_torchs_rules_with_ptx_for_the_newest():
    assert export_archs() == ("9.0+PTX",)
    assert export_archs("9.0;8.0") == ("8.0", "9.0+PTX")
    assert export_archs("Hopper") == ("9.0+PTX",)
    assert export_archs("Ampere;9.0") == ("8.0", "8.6+PTX", "9.0+PTX")
    assert export_archs("8.0 9.0a") == ("8.0", "9.0a+PTX")
    with pytest.raises(ExportError, match="--arch: .*refuses"):
        export_archs("9.0,10.0")
    plan = plan_from_dirs(TASKS / "softmax" / "baselines" / "forward", "softmax", archs="Ampere")
    files = package_files(plan)
    assert 'ARCHS = "8.0;8.6+PTX"' in files["setup.py"]
    assert json.loads(files["src/kbench_softmax/export.json"])["archs"] == ["8.0", "8.6+PTX"]


def test_dtype_checks_are_read_off_the_bindings_torch_checks():
    src = """
    #include <torch/extension.h>
    torch::Tensor helper(torch::Tensor t) { TORCH_CHECK(t.scalar_type() == torch::kHalf, "not read"); return t; }
    // TORCH_CHECK(x.scalar_type() == torch::kInt8, "a comment");
    torch::Tensor fwd(const torch::Tensor& x, torch::Tensor idx, torch::Tensor w, double eps) {
        TORCH_CHECK(x.is_cuda() && (x.scalar_type() == at::kFloat || x.scalar_type() == at::ScalarType::Half),
                    "fwd: x must be ", "float32 or float16");
        TORCH_CHECK(torch::kInt64 == idx.dtype());
        TORCH_CHECK(w.scalar_type() == x.scalar_type(), "same dtype");   // not a fixed dtype: not read
        TORCH_CHECK((w.dim() == 1 && (w.dtype() == torch::kFloat32)), "fwd: \\"w\\" float32");
        return x;
    }
    PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &fwd); }
    """
    checks = [c.to_json() for c in dtype_checks(src, find_entry(src, "forward"))]
    assert checks == [
        {"position": 0, "param": "x", "dtypes": ["float32", "float16"], "message": "fwd: x must be float32 or float16"},
        {"position": 1, "param": "idx", "dtypes": ["int64"],
         "message": "Expected torch::kInt64 == idx.dtype() to be true, but got false."},
        {"position": 2, "param": "w", "dtypes": ["float32"], "message": 'fwd: "w" float32'},
    ]


def test_the_package_carries_the_kernels_dtype_checks():
    plan = plan_from_dirs(TASKS / "layernorm" / "baselines" / "forward", "layernorm", TASKS / "layernorm" / "baselines" / "backward")
    files = package_files(plan)
    ops = json.loads(files["src/kbench_layernorm/export.json"])["ops"]
    assert [(c["position"], c["dtypes"], c["message"]) for c in ops["forward"]["dtype_checks"]] == [
        (0, ["float32"], "layernorm: float32 only"), (1, ["float32"], "layernorm: float32 only"),
        (2, ["float32"], "layernorm: float32 only")]
    assert [c["param"] for c in ops["backward"]["dtype_checks"]] == ["grad_y", "x", "weight"]
    assert 'check_dtypes("forward", args)' in files["src/kbench_layernorm/ops.py"]
    assert "`forward` takes x: float32, weight: float32, bias: float32" in files["README.md"]


def test_a_kernel_that_includes_cute_declares_the_cutlass_headers_package(tmp_path):
    import shutil

    folder = tmp_path / "cand"
    shutil.copytree(TASKS / "softmax" / "baselines" / "forward", folder)
    kernel = folder / "kernel.cu"
    kernel.write_text("#include <cute/tensor.hpp>\n" + kernel.read_text())
    files = package_files(plan_from_dirs(folder, "softmax", force=True))
    pin = f"nvidia-cutlass=={importlib.metadata.version('nvidia-cutlass')}"
    assert f'CUTLASS = "{pin}"' in files["setup.py"] and f'"{pin}"' in files["pyproject.toml"]
    block = files["README.md"].split("<!-- install-and-test -->\n```bash\n", 1)[1].split("```", 1)[0]
    assert f'"{pin}"' in block.splitlines()[0]
    plain = package_files(plan_from_dirs(TASKS / "softmax" / "baselines" / "forward", "softmax"))
    assert 'CUTLASS = ""' in plain["setup.py"] and "nvidia-cutlass==" not in plain["pyproject.toml"]
