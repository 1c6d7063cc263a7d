"""`kbench export` of a Triton candidate, as a user runs it: the installed kbench in a subprocess with a HOME of its
own, then the package installed by pip (pure Python: no compiler, no GPU) and its own tests run. The op is a
torch.library.custom_op over the candidate's launcher and the generated binding; its fake implementation gives
the reference's shapes on every config. A folder with no GPU verdict needs --force, and its README says so."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tomllib

import pytest

from tests.paths import FIXTURES
from tests.user_kbench import kbench

FIXTURE = FIXTURES / "triton" / "llama_rmsnorm_forward"


def _export(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    return kbench(tmp_path / "home", "export", "--from-dir", str(FIXTURE), "--task", "llama_rmsnorm",
                  "--out", str(tmp_path / "pkg"), *extra)


def _install_and_test(tmp_path) -> subprocess.CompletedProcess:
    """pip builds and installs the package (into a folder of its own, beside this interpreter's torch and triton),
    then its tests run from the package's folder against the installed copy."""
    target = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                          "--target", str(target), str(tmp_path / "pkg")], capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "PYTHONPATH": str(target)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=tmp_path / "pkg", capture_output=True, text=True, timeout=600, env=env)


def test_a_triton_candidate_without_a_gpu_verdict_needs_force(tmp_path):
    out = _export(tmp_path)
    assert out.returncode != 0 and "no passing verdict" in out.stderr and "--force" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_the_exported_triton_package_installs_without_a_gpu_and_its_cpu_tests_pass(tmp_path):
    out = _export(tmp_path, "--force")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "torch.ops.kbench_llama_rmsnorm.forward" in out.stdout
    pkg = tmp_path / "pkg"
    src = pkg / "src" / "kbench_llama_rmsnorm"
    assert (src / "kernel.py").read_text() == (FIXTURE / "kernel.py").read_text()    # byte for byte
    assert "from .kernel import kb_forward" in (src / "binding.py").read_text()
    deps = tomllib.loads((pkg / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"triton=={importlib.metadata.version('triton')}" in deps
    assert any(d.startswith("torch==") for d in deps)
    assert "WARNING: exported with --force" in (pkg / "README.md").read_text()
    meta = json.loads((src / "export.json").read_text())
    assert meta["kind"] == "triton" and meta["kernels"]["forward"]["format"] == "triton"
    tests = _install_and_test(tmp_path)
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    # the fake on every config, the registration, the refusals; the GPU tests skipped here
    assert "passed" in tests.stdout and " failed" not in tests.stdout, tests.stdout[-2000:]


@pytest.mark.gpu
def test_on_a_gpu_the_evaluated_triton_candidate_exports_and_its_gpu_tests_pass(tmp_path, gpu_to_itself):
    ev = kbench(tmp_path / "home", "eval", "llama_rmsnorm", str(FIXTURE), "--json", "--no-compile-baseline",
                timeout=1200)
    assert ev.returncode == 0, ev.stdout[-3000:] + ev.stderr[-3000:]
    out = _export(tmp_path)               # kbench eval recorded a pass: no --force
    assert out.returncode == 0, out.stderr[-3000:]
    tests = _install_and_test(tmp_path)
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert "skipped" not in tests.stdout, tests.stdout[-2000:]
