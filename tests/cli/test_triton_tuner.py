"""The tuner on a Triton candidate, as a user starts it: a task folder of their own whose forward baseline is a
Triton kernel.py (a copy of llama_rmsnorm), `kbench evolve FOLDER --proposer tuner` through the installed kbench.
The tuner sweeps the kernel's BLOCK_H and num_warps without annotations; on this machine without a GPU every
candidate is checked in the jail and waits for a GPU (exit 3); on a GPU they are judged (test marked gpu), and the
whole way a user ships one: the fastest tuned kernel exported, its package installed in a fresh venv by its
README and its GPU tests passing there."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.fresh_shell import fresh_venv, run_readme
from tests.paths import FIXTURES, REPO
from tests.user_kbench import kbench


def _triton_task(tmp_path):
    task = tmp_path / "rms_triton"
    shutil.copytree(REPO / "tasks" / "llama_rmsnorm", task)
    (task / "task.toml").write_text((task / "task.toml").read_text().replace('name = "llama_rmsnorm"',
                                                                             'name = "rms_triton"', 1))
    fwd = task / "baselines" / "forward"
    shutil.rmtree(fwd)
    fwd.mkdir()
    shutil.copyfile(FIXTURES / "triton" / "llama_rmsnorm_forward" / "kernel.py", fwd / "kernel.py")
    return task


def _evolve(tmp_path, *extra: str, env: dict[str, str] | None = None):
    task = _triton_task(tmp_path)
    home = tmp_path / "home"
    out = kbench(home, "--workspace", str(tmp_path / "ws"), "evolve", str(task), "--proposer", "tuner",
                 "--generations", "1", "--population", "2", *extra, env=env, timeout=1500)
    log = kbench(home, "--workspace", str(tmp_path / "ws"), "log", "rms_triton-fwd-tuner", "--json")
    assert log.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:] + log.stderr
    return out, json.loads(log.stdout)["candidates"]


def test_the_tuner_sweeps_a_triton_kernels_block_size_and_warps_without_a_gpu(tmp_path):
    out, cands = _evolve(tmp_path, env={"CUDA_VISIBLE_DEVICES": ""})   # no GPU, even on a machine with one
    assert out.returncode == 3, out.stdout[-3000:] + out.stderr[-3000:]
    base = [c for c in cands if c["operator"] == "baseline"]
    tuned = [c for c in cands if c["operator"] == "tune"]
    assert len(base) == 1 and len(tuned) == 2, cands
    for c in base + tuned:
        assert c["verdicts"]["compile"] == "pass" and c["verdicts"]["static"] == "pass", c
    show = kbench(tmp_path / "home", "--workspace", str(tmp_path / "ws"), "show-candidate", tuned[0]["id"], "--json")
    rationale = json.dumps(json.loads(show.stdout))
    assert "BLOCK_H" in rationale or "num_warps" in rationale, rationale[:2000]


@pytest.mark.gpu
def test_on_a_gpu_one_tuner_generation_on_a_triton_kernel_is_judged_correct(tmp_path, gpu_to_itself):
    out, cands = _evolve(tmp_path, "--no-compile-baseline")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    tuned = [c for c in cands if c["operator"] == "tune"]
    assert len(tuned) == 2, cands
    for c in [*tuned, *(c for c in cands if c["operator"] == "baseline")]:
        assert c["verdicts"]["correctness"] == "pass" and c["verdicts"]["integrity"] == "pass", c
        assert c["speedup_eager"], c


@pytest.mark.gpu
def test_on_a_gpu_the_fastest_tuned_triton_kernel_ships_and_its_package_passes_its_gpu_tests(tmp_path, gpu_to_itself):
    out, cands = _evolve(tmp_path, "--no-compile-baseline")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    tuned = [c for c in cands if c["operator"] == "tune" and c["verdicts"]["correctness"] == "pass"
             and c["verdicts"]["integrity"] == "pass" and c["speedup_eager"]]
    assert tuned, cands
    best = max(tuned, key=lambda c: c["speedup_eager"])
    pkg = tmp_path / "pkg"
    exp = kbench(tmp_path / "home", "--workspace", str(tmp_path / "ws"), "export", best["id"], "--out", str(pkg))
    assert exp.returncode == 0, exp.stderr[-3000:]       # the tuned candidate has a passing verdict: no --force
    shipped = (pkg / "src" / "kbench_rms_triton" / "kernel.py").read_text()
    assert shipped != (FIXTURES / "triton" / "llama_rmsnorm_forward" / "kernel.py").read_text()   # the tuned one

    site = fresh_venv(tmp_path / "venv")
    run = run_readme(pkg, tmp_path / "venv", tmp_path / "shell-home", timeout=900)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-6000:]
    assert (site / "kbench_rms_triton" / "kernel.py").read_text() == shipped
    summary = re.search(r"(\d+) passed", log)
    assert summary and "skipped" not in log and "failed" not in log, log[-3000:]    # the gpu tests ran, and passed
    print(f"shipped {best['id']} at {best['speedup_eager']:.2f}x eager: {summary.group(0)} in a fresh venv")
