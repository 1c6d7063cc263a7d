"""engine/harness/kernelbench/fast.py without a compiler: ninja's first failure ends the build (the compiles still
running are killed, not waited for), and the precompiled header's flags reach the C++ half of the build only
(after torch's versioner has hashed the candidate's own arguments)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from engine.harness.kernelbench import fast as kf


def _script(tmp_path, body: str) -> list[str]:
    path = tmp_path / "fake-ninja"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return [str(path)]


def test_the_first_failure_ends_the_build_without_waiting_for_the_other_compiles(tmp_path):
    pid_file = tmp_path / "other.pid"
    cmd = _script(tmp_path, f"sleep 120 & echo $! > {pid_file}\n"
                            "echo '[1/3] nvcc cuda.cu'\necho 'FAILED: cuda.cuda.o'\n"
                            "echo 'cuda.cu(10): error: identifier \"scal\" is undefined'\nwait\n")
    t0 = time.monotonic()
    rc, out = kf.run_until_failure(cmd, str(tmp_path), idle_s=0.3)
    assert rc == 1 and time.monotonic() - t0 < 20
    assert out.splitlines() == ["[1/3] nvcc cuda.cu", "FAILED: cuda.cuda.o",
                                'cuda.cu(10): error: identifier "scal" is undefined']
    other = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(other):
        time.sleep(0.05)
    assert not _running(other), "the compile still running was left behind"


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan waits for its reaper, which may be this test process's)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("status", [0, 3])
def test_a_build_without_a_failed_block_ends_as_ninja_does(tmp_path, status):
    rc, out = kf.run_until_failure(_script(tmp_path, f"echo '[1/1] link'\nexit {status}\n"), str(tmp_path))
    assert (rc, out) == (status, "[1/1] link\n")


def test_fail_fast_raises_torchs_error_with_ninjas_output(tmp_path, monkeypatch):
    cpp = SimpleNamespace(_get_num_workers=lambda verbose: None, _run_ninja_build=None)
    kf.fail_fast(cpp)
    monkeypatch.setattr(kf, "run_until_failure", lambda cmd, cwd: (1, "FAILED: main.o\nmain.cpp:3: error: x\n"))
    with pytest.raises(RuntimeError, match=r"^Error building extension 'e': FAILED: main.o\nmain.cpp:3: error: x"):
        cpp._run_ninja_build(str(tmp_path), False, "Error building extension 'e'")


def test_use_pch_adds_the_headers_flags_to_the_cpp_flags_only():
    seen = {}

    def build(name, sources, extra_cflags, extra_cuda_cflags, extra_sycl_cflags, extra_ldflags,
              extra_include_paths, build_directory, verbose, with_cuda, with_sycl, is_standalone=False):
        seen.update(cflags=extra_cflags, cuda=extra_cuda_cflags)
    cpp = SimpleNamespace(_write_ninja_file_and_build_library=build)
    kf.use_pch(cpp, "/box/pch/kbench_torch.h", ["-std=c++20", "-O1"])
    cpp._write_ninja_file_and_build_library(name="e", sources=["main.cpp"], extra_cflags=["-DX"],
                                            extra_cuda_cflags=["-O3"], extra_sycl_cflags=None, extra_ldflags=[],
                                            extra_include_paths=[], build_directory="/b", verbose=False,
                                            with_cuda=True, with_sycl=False)
    assert seen == {"cflags": ["-DX", "-std=c++20", "-O1", "-include", "/box/pch/kbench_torch.h"], "cuda": ["-O3"]}
