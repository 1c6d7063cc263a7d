"""The CUTLASS/CuTe headers: a pinned dependency (the nvidia-cutlass wheel ships them), on the include path of every
build (native kernel.cu and binding.cpp, a robust-kbench .cu, a KernelBench ModelNew's load_inline calls, an export),
and a candidate's own CuTe kernel compiles with them. Whether CuTe code counts as the candidate's own and CUTLASS's
operators as library calls is tests/integrity/test_static_corpus.py's (corpus/honest/cute_tiled_gemm.cu,
corpus/engineering/cutlass_*.cu)."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.harness import vendor_libs
from engine.harness.build import diagnose
from engine.harness.build.steps import StepResult
from engine.harness.kernelbench.includes import add_include_path
from engine.harness.toolchain import Toolchain
from engine.harness.vendor_libs import CUTLASS_REQUIREMENT, cutlass_include
from tests.paths import FIXTURES, REPO


def test_cutlass_headers_are_a_pinned_dependency():
    pinned = re.search(r'"nvidia-cutlass==([\d.]+)"', (REPO / "pyproject.toml").read_text())
    assert pinned, "pyproject.toml pins nvidia-cutlass"
    assert importlib.metadata.version("nvidia-cutlass") == pinned.group(1)
    assert CUTLASS_REQUIREMENT == f"nvidia-cutlass=={pinned.group(1)}"   # what a build failure tells a user to install
    folder = Path(cutlass_include())
    assert (folder / "cute" / "tensor.hpp").is_file() and (folder / "cutlass" / "gemm" / "device" / "gemm.h").is_file()


def test_every_build_searches_the_cutlass_headers(toolchain: Toolchain):
    folder = cutlass_include()
    assert toolchain.cutlass_include == folder
    for flags in (toolchain.nvcc_kernel_flags(), toolchain.host_flags("kb_x"), toolchain.nvcc_torch_flags("kb_x")):
        assert ["-isystem", folder] == flags[flags.index(folder) - 1:flags.index(folder) + 1]
    without = dataclasses.replace(toolchain, cutlass_include="")
    assert folder not in without.nvcc_kernel_flags() and without.key() != toolchain.key()


def test_a_missing_cute_header_names_the_package_only_where_it_is_not_installed(tmp_path, monkeypatch):
    """nvcc's own words for `#include <cute/tensor.hpp>` without the headers on the path: where the pinned package
    is missing (kbench installed without its dependencies) the verdict says what to install; where it is installed,
    a missing header is the candidate's own mistake and the verdict stays nvcc's."""
    files = {"kernel.cu": "#include <cuda_runtime.h>\n#include <cute/tensor.hpp>\n"}
    (tmp_path / "kernel.cu").write_text(files["kernel.cu"])
    out = ("kernel.cu:2:10: fatal error: cute/tensor.hpp: No such file or directory\n"
           "    2 | #include <cute/tensor.hpp>\ncompilation terminated.\n")
    step = StepResult("nvcc kernel.cu", (), 1, out, 1.0)
    kind, installed = diagnose._diagnose(step, tmp_path, files)
    assert kind == "compile" and "kernel.cu:2: cute/tensor.hpp: No such file" in installed
    assert "pip install" not in installed
    monkeypatch.setattr(vendor_libs, "cutlass_include", lambda: None)
    _, missing = diagnose._diagnose(step, tmp_path, files)
    assert missing.startswith(installed) and f"pip install {CUTLASS_REQUIREMENT}." in missing
    own = StepResult("nvcc kernel.cu", (), 1, out.replace("cute/tensor.hpp", "mine/tensor.hpp"), 1.0)
    assert "pip install" not in diagnose._diagnose(own, tmp_path, files)[1]   # not a CUTLASS header


def test_a_kernelbench_candidates_load_inline_calls_search_them_too():
    calls = []

    def load_inline(name, cpp_sources, cuda_sources=None, extra_include_paths=None, verbose=False):
        calls.append(extra_include_paths)

    def load(name, sources, extra_include_paths=None):
        calls.append(extra_include_paths)

    cpp = SimpleNamespace(load_inline=load_inline, load=load)
    folder = add_include_path(cpp)
    assert folder == cutlass_include()
    assert add_include_path(cpp) == folder                    # once: a second call does not wrap again
    cpp.load_inline("a", "int f();")
    cpp.load_inline("b", "int f();", None, ["/mine"])
    cpp.load_inline("c", "int f();", extra_include_paths=[folder])
    cpp.load("d", ["x.cu"], extra_include_paths="/one")
    assert calls == [[folder], ["/mine", folder], [folder], ["/one", folder]]


@pytest.mark.slow
def test_a_candidates_cute_kernel_compiles(toolchain: Toolchain, tmp_path):
    """One nvcc run, with the flags a native kernel.cu gets (engine/harness/build/native.py): `#include
    <cute/tensor.hpp>` and CUTLASS's numeric types resolve, and the kernel compiles for sm_90."""
    kernel = FIXTURES / "cute_kernel" / "kernel.cu"
    assert "#include <cute/tensor.hpp>" in kernel.read_text()
    out = tmp_path / "kernel.o"
    run = subprocess.run([toolchain.nvcc, "-c", str(kernel), "-o", str(out), *toolchain.nvcc_kernel_flags()],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    assert out.stat().st_size > 0
