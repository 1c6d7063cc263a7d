"""engine/harness/toolchain_cache.py: the toolchain an earlier run detected is reused for the same fingerprint
(no torch import, no compiler run), detected again where anything detect() reads has changed, and a kept file
that is broken or altered is never believed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from engine.harness import toolchain_cache as tcc
from engine.harness.toolchain import Toolchain
from tests.paths import REPO


def fake_toolchain(archs: tuple[str, ...] = ("9.0a",)) -> Toolchain:
    return Toolchain(cuda_home="/opt/cuda", nvcc="/opt/cuda/bin/nvcc", nvcc_version="13.0.88", cxx="/usr/bin/g++",
                     cxx_version="13.2.0", cxx_is_gcc=True, torch_version="2.14.1", cuda_version="13.0",
                     python_include="/usr/include/python3.11", ext_suffix=".so", include_dirs=("/a", "/b"),
                     library_dirs=("/l",), defines=("D=1",), cxx_std="c++20", archs=archs, arch_source="gpu",
                     vendor_include_dirs=("/v",), cutlass_include="")


@pytest.fixture
def detections(monkeypatch) -> list[Toolchain]:
    """detect() replaced: the toolchains it returned, one per call."""
    calls: list[Toolchain] = []

    def detect():
        calls.append(fake_toolchain((os.environ.get("TORCH_CUDA_ARCH_LIST") or "9.0a",)))
        return calls[-1]
    monkeypatch.setattr(tcc, "detect", detect)
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    return calls


def test_the_same_machine_is_detected_once_and_the_kept_toolchain_is_equal(tmp_path, detections):
    first = tcc.cached_toolchain(tmp_path)
    again = tcc.cached_toolchain(tmp_path)
    assert len(detections) == 1
    assert again == first and again.key() == first.key() and again.arch_source == "gpu"
    assert isinstance(again.include_dirs, tuple)


def test_a_change_detect_would_see_is_detected_again(tmp_path, detections, monkeypatch):
    tcc.cached_toolchain(tmp_path)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    assert tcc.cached_toolchain(tmp_path).archs == ("8.0",)
    assert len(detections) == 2
    monkeypatch.setenv("CUDA_PATH", "/opt/another-cuda")      # a variable detect() honours
    tcc.cached_toolchain(tmp_path)
    assert len(detections) == 3
    monkeypatch.setattr(tcc, "_identity", lambda path: [path, 1, 2, 3])    # a reinstalled compiler or torch
    tcc.cached_toolchain(tmp_path)
    assert len(detections) == 4
    tcc.cached_toolchain(tmp_path)
    assert len(detections) == 4


@pytest.mark.parametrize("damage", ["not json", "other key", "missing field"])
def test_a_broken_or_altered_file_is_not_believed(tmp_path, detections, damage):
    tcc.cached_toolchain(tmp_path)
    (path,) = (tmp_path / tcc.FOLDER).glob("*.json")
    data = json.loads(path.read_text())
    if damage == "not json":
        path.write_text("{ half a file")
    elif damage == "other key":        # flags changed by hand: the toolchain no longer hashes to its key
        data["toolchain"]["cxx_std"] = "c++17"
        path.write_text(json.dumps(data))
    else:
        del data["toolchain"]["nvcc"]
        path.write_text(json.dumps(data))
    assert tcc.cached_toolchain(tmp_path) == detections[0]
    assert len(detections) == 2


def test_a_folder_that_cannot_be_written_costs_a_detection_not_the_toolchain(tmp_path, detections):
    (tmp_path / tcc.FOLDER).write_text("a file where the folder would be")
    assert tcc.cached_toolchain(tmp_path) == detections[0]
    assert tcc.cached_toolchain(tmp_path) == detections[0] and len(detections) == 2


@pytest.mark.skipif(not os.access("/usr/local/cuda/bin/nvcc", os.X_OK) and not os.environ.get("CUDA_HOME"),
                    reason="needs a CUDA toolkit")
def test_a_kept_toolchain_is_read_without_importing_torch(tmp_path):
    code = ("import sys; from engine.harness.toolchain_cache import cached_toolchain; "
            f"tc = cached_toolchain({str(tmp_path)!r}); print(tc.key(), 'torch' in sys.modules)")
    env = {**os.environ, "CUDA_HOME": os.environ.get("CUDA_HOME", "/usr/local/cuda"), "PYTHONPATH": str(REPO)}
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    key, imported = first.stdout.split()
    assert imported == "True"                                   # detected: torch was needed
    assert second.stdout.split() == [key, "False"]              # kept: the same key, torch never loaded
