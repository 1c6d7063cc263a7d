"""Compile stage: toolchain detection, the native split build, its cache, diagnostics and timeouts.

Tests marked `slow` run the real compilers (nvcc + g++; no GPU needed). They share one cache directory and
one built fixture per module, so the precompiled header and the fixture are compiled once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.candidates import Candidate, load_candidate
from engine.config.env import env_flag
from engine.harness import pch
from engine.harness.build import stage as B
from engine.harness.build.cache import entry_dir, kernelbench_extensions_dir
from engine.harness.build.diagnose import _unresolved
from engine.harness.build.result import BuildResult, BuildSummary
from engine.harness.build.stage import build_candidate
from engine.harness.build.steps import compiler_env, run_tool
from engine.harness.pch import ensure_pch, pch_dir
from engine.harness.toolchain import Toolchain, ToolchainError, detect, parse_arch_list

from tests.conftest import HAS_NVCC
from tests.paths import FIXTURES, REPO

FIXTURE = FIXTURES / "native"
needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="needs nvcc (set CUDA_HOME)")


def _fake_toolchain(tc: Toolchain, tmp: Path, script: str) -> Toolchain:
    """The real toolchain with nvcc and g++ replaced by a shell script (no PCH: not GCC)."""
    fake = tmp / "fakecc"
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return dataclasses.replace(tc, nvcc=str(fake), cxx=str(fake), cxx_is_gcc=False)


def _native(**changes: str) -> Candidate:
    c = load_candidate(FIXTURE)
    return Candidate("native", {**c.files, **changes}, c.name)


# ---------------------------------------------------------------------------- toolchain (no compiler runs)
def test_parse_arch_list_reads_torch_cuda_arch_list_by_torchs_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsed by torch's own function, so kbench accepts exactly what a torch extension build accepts."""
    from torch.utils.cpp_extension import _get_cuda_arch_flags

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "7.5")
    assert parse_arch_list("8.0;9.0+PTX") == ("8.0", "9.0+PTX")
    assert parse_arch_list(" 9.0a 10.0;9.0a") == ("9.0a", "10.0")        # spaces separate too; lowest first
    assert parse_arch_list("Hopper") == ("9.0+PTX",)                     # torch's named architectures
    assert parse_arch_list("Ampere;9.0a") == ("8.0", "8.6+PTX", "9.0a")
    for text in ("Hopper", "Ampere;9.0a", "8.0 9.0a+PTX"):              # the same flags as torch gives
        tc_flags = sorted(set(dataclasses.replace(_any_toolchain(), archs=parse_arch_list(text)).gencode_flags()))
        monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", text)
        assert tc_flags == _get_cuda_arch_flags(), text
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "7.5")
    for bad in ("9.0,10.0", "Hoper", "10.0f"):                           # torch refuses a comma, a typo
        with pytest.raises(ToolchainError, match="refuses it"):
            parse_arch_list(bad)
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == "7.5"                   # put back as it was


def _any_toolchain() -> Toolchain:
    return Toolchain(cuda_home="/cuda", nvcc="/cuda/bin/nvcc", nvcc_version="13.0", cxx="/usr/bin/g++",
                     cxx_version="13", cxx_is_gcc=True, torch_version="2", cuda_version="13.0", python_include="/py",
                     ext_suffix=".so", include_dirs=(), library_dirs=(), defines=(), cxx_std="c++20", archs=("9.0",))


def test_toolchain_flags_and_key(toolchain: Toolchain) -> None:
    tc = dataclasses.replace(toolchain, archs=("8.0", "9.0a+PTX"))
    assert tc.gencode_flags() == ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90a,code=sm_90a",
                                  "-gencode=arch=compute_90a,code=compute_90a"]
    assert tc.key() != toolchain.key()
    assert dataclasses.replace(toolchain, arch_source="gpu").key() == toolchain.key()  # provenance only
    host = toolchain.host_flags("kb_x")
    assert "-DTORCH_EXTENSION_NAME=kb_x" in host and "-DTORCH_API_INCLUDE_EXTENSION_H" in host
    assert toolchain.host_flags(None) == [f for f in host if f != "-DTORCH_EXTENSION_NAME=kb_x"]
    assert any(f.startswith("-D_GLIBCXX_USE_CXX11_ABI=") for f in host)
    kernel = toolchain.nvcc_kernel_flags()
    assert "-std=c++17" in kernel and "-lineinfo" in kernel and "--expt-relaxed-constexpr" in kernel
    assert not any("torch" in f for f in kernel)  # kernel.cu never sees torch headers
    assert {"-ltorch", "-ltorch_python", "-lc10", "-lc10_cuda", "-ltorch_cuda", "-lcudart"} <= set(toolchain.link_flags())


def test_detect_reads_arch_env(monkeypatch: pytest.MonkeyPatch) -> None:
    if not HAS_NVCC:
        pytest.skip("needs nvcc")
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.6;9.0")
    tc = detect()
    assert tc.archs == ("8.6", "9.0") and tc.arch_source == "env"
    assert Path(tc.nvcc).is_file() and Path(tc.cxx).is_file()


def test_a_visible_hopper_or_no_gpu_builds_for_sm_90a(monkeypatch: pytest.MonkeyPatch) -> None:
    """wgmma and setmaxnreg only compile for sm_90a: the arch-specific target of the GPU that measures."""
    if not HAS_NVCC:
        pytest.skip("needs nvcc")
    import engine.harness.toolchain as T
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    monkeypatch.setattr(T, "_visible_gpu_archs", lambda: ("9.0",))
    tc = detect()
    assert tc.archs == ("9.0a",) and tc.arch_source == "gpu"
    assert "-gencode=arch=compute_90a,code=sm_90a" in tc.nvcc_kernel_flags()
    monkeypatch.setattr(T, "_visible_gpu_archs", lambda: ("8.6",))
    assert detect().archs == ("8.6",)
    monkeypatch.setattr(T, "_visible_gpu_archs", lambda: ())
    assert detect().archs == ("9.0a",) and detect().arch_source == "default"


# ---------------------------------------------------------------------------- subprocess hygiene
def test_scrubbed_env_drops_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret")
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-G")  # would change object code behind the cache key
    monkeypatch.setenv("CUDA_HOME", "/usr/local/cuda")
    env = compiler_env()
    assert "ANTHROPIC_API_KEY" not in env and "GITHUB_TOKEN" not in env and "NVCC_APPEND_FLAGS" not in env
    assert env["CUDA_HOME"] == "/usr/local/cuda" and "PATH" in env and env["LC_ALL"] == "C"


def test_build_summary_is_what_crosses_to_the_executor() -> None:
    """BuildSummary keeps what the compile verdict needs, not the worker's paths; it reads stand-ins' partial dicts."""
    r = BuildResult(ok=True, format="native", source_hash="abc", module_name="kb_abc", so_path=Path("/w/kb_abc.so"),
                    seconds=1.5, cache_hit=True, log="x" * 9000, steps={"nvcc": 1.0})
    s = BuildSummary.of(r)
    assert (s.ok, s.seconds, s.cache_hit, s.steps, len(s.log)) == (True, 1.5, True, {"nvcc": 1.0}, 8000)
    assert BuildSummary.from_json(json.loads(json.dumps(s.to_json()))) == s
    assert "so_path" not in s.to_json()
    partial = BuildSummary.from_json({"ok": False, "error": "boom"})
    assert (partial.ok, partial.error, partial.log, partial.seconds, partial.cache_hit, partial.steps) == \
        (False, "boom", "", None, False, {})


def test_run_tool_timeout_kills_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    t0 = time.monotonic()
    step = run_tool(["bash", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], tmp_path, 1.0, "sleeper")
    assert step.timed_out and not step.ok and time.monotonic() - t0 < 15
    pid = int(pidfile.read_text())
    for _ in range(50):  # the grandchild must die with the group (it may linger briefly as a zombie)
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"grandchild {pid} survived the timeout")


def test_build_timeout_is_reported_and_not_cached(toolchain: Toolchain, tmp_path: Path) -> None:
    tc = _fake_toolchain(toolchain, tmp_path, "sleep 60\n")
    cand = _native()
    t0 = time.monotonic()
    res = build_candidate(cand, tmp_path / "cache", tc, timeout_s=1.0)
    assert not res.ok and res.failure == "timeout" and time.monotonic() - t0 < 20
    assert "timed out after 1 s" in res.error and "process group was killed" in res.error
    assert not entry_dir(tmp_path / "cache", tc, cand).exists()


def test_failures_are_cached_and_force_rebuilds(toolchain: Toolchain, tmp_path: Path) -> None:
    # a fake compiler that fails like nvcc does: deterministic, so cached
    tc = _fake_toolchain(toolchain, tmp_path, 'echo "kernel.cu(9): error: identifier \\"oops\\" is undefined"\n'
                                              "exit 1\n")
    cand = _native()
    cache = tmp_path / "cache"
    first = build_candidate(cand, cache, tc)
    assert not first.ok and first.failure == "compile" and not first.cache_hit
    assert first.error.startswith("nvcc kernel.cu failed: kernel.cu:9: identifier \"oops\" is undefined")
    assert "line 9 reads `" in first.error  # the offending source line is quoted
    again = build_candidate(cand, cache, tc)
    assert again.cache_hit and again.error == first.error and again.seconds < 0.5
    forced = build_candidate(cand, cache, tc, force=True)
    assert not forced.cache_hit and forced.error == first.error
    leftovers = [p.name for p in entry_dir(cache, tc, cand).parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # temp and old dirs are gone


def test_half_written_entry_is_not_a_hit(toolchain: Toolchain, tmp_path: Path) -> None:
    tc = _fake_toolchain(toolchain, tmp_path, "echo 'binding.cpp:3:1: error: nope'; exit 1\n")
    cand = _native()
    entry = entry_dir(tmp_path / "cache", tc, cand)
    (entry.parent / f".tmp-{cand.source_hash}-1-dead").mkdir(parents=True)  # a killed build's leftovers
    res = build_candidate(cand, tmp_path / "cache", tc)
    assert not res.cache_hit and res.failure == "compile"


def test_kernelbench_without_an_extension_has_nothing_to_compile(toolchain: Toolchain, tmp_path: Path) -> None:
    cand = Candidate("kernelbench", {"model_new.py": "class ModelNew:\n    pass\n"})
    res = build_candidate(cand, tmp_path, toolchain)
    assert res.ok and res.so_path is None and res.module_name is None
    assert "nothing to compile" in res.log
    d = kernelbench_extensions_dir(tmp_path, cand, toolchain)
    assert d.name == cand.source_hash and toolchain.key() in d.parts


def test_kernelbench_syntax_error_fails_the_compile_stage(toolchain: Toolchain, tmp_path: Path) -> None:
    cand = Candidate("kernelbench", {"model_new.py": "import torch\nclass ModelNew(torch.nn.Module:\n    pass\n"})
    res = build_candidate(cand, tmp_path, toolchain)
    assert not res.ok and res.failure == "compile"
    assert res.error.startswith("model_new.py:2: Python syntax error")


KB_CANDIDATES = FIXTURES / "kernelbench" / "candidates"


@pytest.mark.slow
def test_kernelbench_modelnew_whose_cuda_does_not_compile_fails_with_nvccs_message(
        toolchain: Toolchain, tmp_path: Path) -> None:
    """The ModelNew file's load_inline runs in the compile stage (a sandboxed child, no GPU): its nvcc error is the
    compile verdict's reason, not a pass followed by an import failure on the GPU."""
    cand = load_candidate(KB_CANDIDATES / "scaled_swish_compile_error.py")
    res = build_candidate(cand, tmp_path, toolchain)
    assert not res.ok and res.failure == "compile", res.log
    assert 'cuda.cu:10: identifier "scal" is undefined' in res.error
    assert "y[i] = scal * x[i]" in res.error  # the offending source line is quoted
    assert "kbench_fixture_swish_compile_error" in res.error and "scaled_swish_compile_error.py" in res.error
    again = build_candidate(cand, tmp_path, toolchain)
    assert again.cache_hit and not again.ok and again.error == res.error  # a compile error is deterministic


@pytest.mark.slow
def test_kernelbench_modelnew_compiles_into_its_extensions_dir(toolchain: Toolchain, tmp_path: Path) -> None:
    cand = load_candidate(KB_CANDIDATES / "scaled_swish_correct.py")
    res = build_candidate(cand, tmp_path, toolchain)
    assert res.ok, f"{res.error}\n{res.log}"
    assert "load_inline kbench_fixture_scaled_swish_correct: ok" in res.log
    built = kernelbench_extensions_dir(tmp_path, cand) / "kbench_fixture_scaled_swish_correct"
    assert (built / "kbench_fixture_scaled_swish_correct.so").is_file()
    ninja = (built / "build.ninja").read_text()
    assert "sm_90" in ninja  # the toolchain's arch list, not the machine's GPU
    assert f"-I{toolchain.cutlass_include}" in ninja  # the CUTLASS/CuTe headers, as on every build
    # The runner imports a copy in its scratch: torch must load the built library, not run ninja again (a copy's
    # build.ninja names other paths, so ninja would rebuild: 60-80 s inside the evaluation).
    from engine.pipeline.judge.runner_process import make_run_dir, stage_candidate
    from engine.pipeline.protocol.types import CandidateSpec
    run = make_run_dir()
    stage_candidate(run, CandidateSpec("kernelbench", "kb_probe", py_path=str(KB_CANDIDATES / "scaled_swish_correct.py"),
                                       torch_extensions=str(kernelbench_extensions_dir(tmp_path, cand))))
    staged = run.scratch / "torch_ext"
    so = staged / built.name / f"{built.name}.so"
    before = so.stat().st_mtime_ns, (staged / built.name / ".ninja_log").read_text()
    probe = ("import sys; from engine.pipeline.runner.main import load_candidate; "
             "from engine.pipeline.protocol.messages import Load; "
             "m = load_candidate(Load('kb_probe', py_path=sys.argv[1])); print(m.ModelNew.__name__)")
    env = {**compiler_env(), "TORCH_EXTENSIONS_DIR": str(staged), "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", probe, str(KB_CANDIDATES / "scaled_swish_correct.py")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ModelNew", out.stderr[-3000:]
    assert (so.stat().st_mtime_ns, (staged / built.name / ".ninja_log").read_text()) == before
    shutil.rmtree(run.root, ignore_errors=True)


def test_result_json_round_trip(tmp_path: Path) -> None:
    res = BuildResult(ok=True, format="native", source_hash="abc", module_name="kb_abc",
                      so_path=tmp_path / "kb_abc.so", seconds=1.5, steps={"nvcc": 1.0}, pch_used=True)
    assert BuildResult.from_json(json.loads(json.dumps(res.to_json()))) == res


# ---------------------------------------------------------------------------- diagnostics on recorded output
def _step(name: str, output: str, rc: int = 1) -> B.StepResult:
    return B.StepResult(name, (), rc, output, 1.0)


def test_diagnose_gcc_error_in_torch_header_names_the_candidate_line(tmp_path: Path) -> None:
    out = ("In file included from /opt/torch/include/ATen/Tensor.h:3,\n"
           "                 from binding.cpp:2:\n"
           "/opt/torch/include/ATen/core/TensorBody.h:100:5: error: no matching function for call to 'f(int)'\n"
           "binding.cpp:14:20:   required from here\n")
    kind, msg = B._diagnose(_step("g++ binding.cpp", out), tmp_path, {"binding.cpp": "", "kernel.cu": ""})
    assert kind == "compile"
    assert "TensorBody.h:100: no matching function" in msg and "reached from binding.cpp:2" in msg


def test_diagnose_ptxas_and_link_errors(tmp_path: Path) -> None:
    out = "ptxas error   : Entry function '_Z3fooPf' uses too much shared data (0x20000 bytes, 0xc000 max)\n"
    kind, msg = B._diagnose(_step("nvcc kernel.cu", out), tmp_path, {"kernel.cu": ""})
    assert kind == "compile" and "too much shared data" in msg
    out = "/usr/bin/ld: cannot find -lnope: No such file or directory\ncollect2: error: ld returned 1 exit status\n"
    kind, msg = B._diagnose(_step("link", out), tmp_path, {})
    assert kind == "link" and "cannot find -lnope" in msg


def test_unresolved_ignores_python_api() -> None:
    out = ("/usr/bin/ld: binding.o: in function `forward(at::Tensor)':\n"
           "binding.cpp:(.text+0x10): warning: undefined reference to `PyGILState_Check'\n"
           "binding.cpp:(.text+0x20): warning: undefined reference to `launch(float*, int)'\n")
    assert _unresolved(out) == [("launch(float*, int)", "binding.o", "forward(at::Tensor)")]


# ---------------------------------------------------------------------------- real compiles (slow)
@pytest.fixture(scope="module")
def cache_root(native_cache_root: Path) -> Path:
    return native_cache_root  # shared with tests/harness/test_object_cache.py: one precompiled header per session


@pytest.fixture(scope="module")
def built(toolchain: Toolchain, cache_root: Path) -> BuildResult:
    res = build_candidate(load_candidate(FIXTURE), cache_root, toolchain)
    assert res.ok, f"{res.error}\n{res.log}"
    return res


@pytest.mark.slow
def test_native_build_imports_and_exposes_forward(built: BuildResult) -> None:
    assert built.so_path.is_file() and built.module_name == f"kb_{built.source_hash}"
    assert not built.cache_hit and {"nvcc", "cxx", "link"} <= set(built.steps)
    code = ("import json, sys\nfrom engine.harness.build.stage import BuildResult, load_module\n"
            "m = load_module(BuildResult.from_json(json.loads(sys.argv[1])))\n"
            "print(m.__name__, callable(m.forward))\n")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(built.to_json())], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [built.module_name, "True"]


@pytest.mark.slow
def test_pch_is_used(built: BuildResult, toolchain: Toolchain, cache_root: Path) -> None:
    gch = pch_dir(cache_root, toolchain) / (pch.PCH_BASENAME + ".gch")
    assert gch.is_file()
    assert built.pch_used is True
    raw = (built.entry_dir / "build.log").read_text()
    assert f"! {gch}" in raw  # g++ -H marks a PCH it accepted with '!'
    assert "not used because" not in raw  # -Winvalid-pch stayed silent
    again = ensure_pch(cache_root, toolchain)
    assert not again.built and again.seconds < 0.5


@pytest.mark.slow
def test_second_build_is_a_fast_cache_hit(built: BuildResult, toolchain: Toolchain, cache_root: Path) -> None:
    res = build_candidate(load_candidate(FIXTURE), cache_root, toolchain)
    assert res.ok and res.cache_hit and res.seconds < 0.2
    assert res.so_path == built.so_path and res.steps == built.steps


@pytest.mark.slow
def test_build_entry_travels_to_another_machines_cache(built: BuildResult, toolchain: Toolchain,
                                                       tmp_path: Path) -> None:
    """What the Ray executor does between a compile node and a GPU node: pack the entry, install it in
    another cache, and the build there is a cache hit on the same bytes, importable from its new place."""
    from engine.harness.build.archive import pack_entry, unpack_entry

    data = pack_entry(built.entry_dir)
    other = tmp_path / "gpu-node-cache"
    entry = unpack_entry(data, other, toolchain.key(), built.source_hash)
    assert entry == entry_dir(other, toolchain, load_candidate(FIXTURE))
    assert unpack_entry(data, other, toolchain.key(), built.source_hash) == entry     # an existing entry wins
    res = build_candidate(load_candidate(FIXTURE), other, toolchain)
    assert res.ok and res.cache_hit and res.so_path.parent == entry
    assert res.so_path.read_bytes() == built.so_path.read_bytes()
    code = ("import json, sys\nfrom engine.harness.build.stage import BuildResult, load_module\n"
            "m = load_module(BuildResult.from_json(json.loads(sys.argv[1])))\nprint(callable(m.forward))\n")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(res.to_json())], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stderr
    assert not list(entry.parent.glob(".tmp-*"))                                       # no leftovers


def test_build_archive_refuses_unsafe_members(tmp_path: Path) -> None:
    import io
    import tarfile

    from engine.harness.build.archive import unpack_entry

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escape.so")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(ValueError, match="unsafe member"):
        unpack_entry(buf.getvalue(), tmp_path / "cache", "key", "abc")
    assert not (tmp_path / "escape.so").exists() and not list((tmp_path / "cache" / "builds" / "key").iterdir())


@pytest.mark.slow
def test_compile_error_names_kernel_cu_and_line(built: BuildResult, toolchain: Toolchain, cache_root: Path) -> None:
    lines = load_candidate(FIXTURE).files["kernel.cu"].splitlines()
    at = next(i for i, l in enumerate(lines) if "out[i] =" in l)
    lines.insert(at + 1, "        undeclared_thing_xyz += 1;")
    res = build_candidate(_native(**{"kernel.cu": "\n".join(lines) + "\n"}), cache_root, toolchain)
    assert not res.ok and res.failure == "compile" and res.so_path is None
    assert f"kernel.cu:{at + 2}:" in res.error and "undeclared_thing_xyz" in res.error
    assert "undeclared_thing_xyz" in res.log and "/.tmp-" not in res.log  # paths shown relative


@pytest.mark.slow
def test_missing_launcher_is_a_clear_link_error(built: BuildResult, toolchain: Toolchain, cache_root: Path) -> None:
    binding = load_candidate(FIXTURE).files["binding.cpp"]
    binding = binding.replace('#include "launch.h"',
                              '#include "launch.h"\nvoid scale_add_launch_v2(const float*, const float*, float*, '
                              'float, long long, cudaStream_t);')
    binding = binding.replace("scale_add_launch(xc", "scale_add_launch_v2(xc")
    res = build_candidate(_native(**{"binding.cpp": binding}), cache_root, toolchain)
    assert not res.ok and res.failure == "link"
    assert "scale_add_launch_v2(float const*" in res.error and "nothing defines" in res.error
    assert "kernel.cu defines: scale_add_launch(float const*" in res.error
    assert "binding.cpp (in forward(" in res.error


@pytest.mark.slow
@pytest.mark.skipif(not env_flag("KBENCH_TEST_SINGLE_CU"),
                    reason="nvcc with torch headers takes minutes on a small box; set KBENCH_TEST_SINGLE_CU=1")
def test_single_cu_builds(toolchain: Toolchain, cache_root: Path) -> None:
    src = FIXTURE / "kernel.cu"
    text = ("#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n#include <c10/cuda/CUDAGuard.h>\n"
            + src.read_text().replace('#include "launch.h"', "")
            + (FIXTURE / "binding.cpp").read_text().split('#include "launch.h"', 1)[1])
    res = build_candidate(Candidate("robust-kbench", {"forward.cu": text}), cache_root, toolchain)
    assert res.ok, f"{res.error}\n{res.log}"
    assert res.so_path.is_file() and res.pch_used is None
