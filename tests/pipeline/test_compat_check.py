"""scripts/compat_check.py over small checkouts laid out as robust-kbench's and KernelBench's are."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import FIXTURES, REPO

SCRIPT = REPO / "scripts" / "compat_check.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO)


@pytest.fixture
def rkb_checkout(tmp_path: Path) -> Path:
    """tasks/<name>/func_*.py as upstream lays them out, plus one task folder that cannot load."""
    root = tmp_path / "robust-kbench"
    for name in ("linear", "pool", "batchnorm"):
        shutil.copytree(FIXTURES / "robust_kbench" / name, root / "tasks" / name)
    broken = root / "tasks" / "broken"
    broken.mkdir(parents=True)
    (broken / "func_forward.py").write_text("def forward_fn(x:\n")   # a syntax error
    kernels = root / "highlighted" / "linear" / "forward"
    kernels.mkdir(parents=True)
    shutil.copy(FIXTURES / "robust_kbench" / "candidates" / "linear_forward_correct.cu", kernels / "kernel.cu")
    return root


def test_robust_kbench_checkout_table_and_exit_status(rkb_checkout: Path, tmp_path: Path):
    out = tmp_path / "rows.json"
    proc = _run(str(rkb_checkout), "--json", str(out))
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"linear", "pool", "batchnorm", "broken"}
    assert rows["linear"]["loads"] and rows["linear"]["directions"] == ["forward", "backward"]
    assert rows["batchnorm"]["loads"] and rows["batchnorm"]["configs"] > 0
    assert not rows["broken"]["loads"] and rows["broken"]["error"]
    assert "robust-kbench: 3/4 load" in proc.stdout
    assert proc.returncode == 1, "a robust-kbench task folder that does not load must fail the run"

    shutil.rmtree(rkb_checkout / "tasks" / "broken")
    again = _run(str(rkb_checkout), "--quiet")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "robust-kbench: 3/3 load" in again.stdout


def test_kernelbench_checkout_levels(tmp_path: Path):
    root = tmp_path / "KernelBench" / "KernelBench"
    (root / "level1").mkdir(parents=True)
    (root / "level4").mkdir(parents=True)
    shutil.copy(FIXTURES / "kernelbench" / "matmul_relu.py", root / "level1" / "1_matmul_relu.py")
    shutil.copy(FIXTURES / "kernelbench" / "symmetric_matmul.py", root / "level1" / "2_symmetric_matmul.py")
    shutil.copy(FIXTURES / "kernelbench" / "needs_package.py", root / "level4" / "1_needs_package.py")
    out = tmp_path / "rows.json"
    proc = _run(str(tmp_path / "KernelBench"), "--json", str(out))
    rows = json.loads(out.read_text())["rows"]
    by_level = {r["source"]: [x for x in rows if x["source"] == r["source"]] for r in rows}
    assert all(r["loads"] for r in by_level["kernelbench/level1"])
    level4 = by_level["kernelbench/level4"]
    assert not level4[0]["loads"] and "install" in level4[0]["error"]
    # level 4 may need packages this machine lacks: that is reported, not a failure of the run
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _compat_module():
    spec = importlib.util.spec_from_file_location("compat_check_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # its dataclasses look their module up while being defined
    spec.loader.exec_module(mod)
    return mod


def test_eval_hands_the_deadline_to_the_judge(rkb_checkout: Path, monkeypatch):
    """--timeout is the judge's own deadline (EvalOptions.timeout_s); without it, kbench's default stands."""
    import engine.pipeline.evaluate as evaluate_mod

    seen = []

    def fake_evaluate(task, candidate, direction, opts):
        seen.append((task.name, candidate.format, direction, opts.timeout_s, opts.timing))
        raise RuntimeError("stop here: the GPU part is not under test")

    monkeypatch.setattr(evaluate_mod, "evaluate", fake_evaluate)
    mod = _compat_module()
    entries = mod.evaluate_kernels(rkb_checkout, ("upstream",), timing=False, timeout_s=42.0)
    assert seen == [("linear", "robust-kbench", "forward", 42.0, False)]
    assert entries[0]["kernel"] == "linear/forward" and "stop here" in entries[0]["verdict"]
    seen.clear()
    mod.evaluate_kernels(rkb_checkout, ("upstream",))
    assert seen[0][3] == evaluate_mod.EvalOptions().timeout_s
