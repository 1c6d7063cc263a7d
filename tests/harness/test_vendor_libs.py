"""Vendor libraries under the `engineering` policy: the build links the libraries a candidate's headers name
(engine/harness/vendor_libs.py), so a cuBLAS GEMM with a fused epilogue builds and imports; under `pure` the
static stage fails it before any build (tests/integrity/test_library_policy.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import HAS_NVCC
from engine.candidates import load_candidate
from engine.harness.build.stage import build_candidate, load_module
from engine.harness.toolchain import detect
from engine.harness.vendor_libs import libraries_used, library_files
from tests.paths import FIXTURES

CUBLAS = FIXTURES / "hacks" / "vendor_cublas"


def test_headers_name_their_libraries_and_comments_or_device_headers_do_not():
    files = {"kernel.cu": '#include <cublas_v2.h>\n#include "cublasLt.h"\n#include <curand_kernel.h>\n'
                          '// #include <cudnn.h> is not an include\n',
             "binding.cpp": "#include <torch/extension.h>\n#include <cufft.h>\n"}
    assert libraries_used(files) == ["cublas", "cublasLt", "cufft"]
    assert libraries_used({"k.cu": "#include <cuda_runtime.h>\n#include <cub/cub.cuh>\n"}) == []


def test_the_highest_versioned_file_is_linked_where_no_plain_name_exists(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    for name in ("libcublas.so.12", "libcublas.so.13", "libcublas.so.13.1.0"):
        (b / name).write_bytes(b"")
    (a / "libcufft.so").write_bytes(b"")
    files, missing = library_files(["cublas", "cufft", "cudnn"], [str(a), str(b)])
    assert files == [str(b / "libcublas.so.13.1.0"), str(a / "libcufft.so")] and missing == ["cudnn"]


@pytest.mark.slow
@pytest.mark.skipif(not HAS_NVCC, reason="needs nvcc (set CUDA_HOME)")
def test_a_cublas_candidate_links_cublas_and_imports(native_cache_root):
    tc = detect()
    res = build_candidate(load_candidate(CUBLAS), native_cache_root, tc)
    assert res.ok, res.error
    needed = subprocess.run(["readelf", "-d", str(res.so_path)], capture_output=True, text=True).stdout
    assert "libcublas.so" in needed, needed
    mod = load_module(res)
    assert hasattr(mod, "forward")


@pytest.mark.slow
@pytest.mark.skipif(not HAS_NVCC, reason="needs nvcc (set CUDA_HOME)")
def test_kernel_cu_finds_every_allowed_librarys_headers(tmp_path):
    """cuDNN's headers live in their own wheel beside torch: kernel.cu sees them as it sees cuBLAS's."""
    tc = detect()
    if not any(Path(d, "cudnn.h").is_file() for d in tc.vendor_include_dirs) and \
            not Path(tc.cuda_home, "include", "cudnn.h").is_file():
        pytest.skip("no cuDNN headers on this machine")
    (tmp_path / "k.cu").write_text("#include <cudnn.h>\n#include <cublas_v2.h>\nint f() { return CUDNN_MAJOR; }\n")
    r = subprocess.run([tc.nvcc, "-c", "k.cu", "-o", "k.o", *tc.nvcc_kernel_flags()], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
