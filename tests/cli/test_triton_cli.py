"""Triton candidates as a user meets them on a machine without a GPU: the installed `kbench` in a subprocess, with a
HOME of the test's own. `kbench glue --lang triton` gives the kernel.py skeleton and the binding.py kbench generates;
`kbench eval` of a Triton kernel.py checks it statically, imports it in the jailed compile child (the compile
verdict says that is what was checked) and exits 3, as a CUDA candidate does without a GPU; a kernel.py that does
not import fails the compile stage with the reason, and its import runs in the jail."""

from __future__ import annotations

import ast
import json
import shutil

from tests.paths import FIXTURES
from tests.user_kbench import kbench

FIXTURE = FIXTURES / "triton" / "llama_rmsnorm_forward"


def _verdict(report: dict, stage: str) -> dict:
    return next(v for v in report["verdicts"] if v["stage"] == stage)


def test_glue_lang_triton_prints_the_launcher_skeleton_and_the_binding(tmp_path):
    proc = kbench(tmp_path / "home", "glue", "llama_rmsnorm", "--lang", "triton")
    assert proc.returncode == 0, proc.stderr
    launcher = next(n for n in ast.parse(proc.stdout).body if isinstance(n, ast.FunctionDef) and n.name == "kb_forward")
    assert [a.arg for a in launcher.args.args] == ["x", "w", "eps", "y", "B", "S", "H"]
    assert "import triton.language as tl" in proc.stdout and "@triton.jit" in proc.stdout
    proc = kbench(tmp_path / "home", "glue", "llama_rmsnorm", "--backward", "--lang", "triton", "--binding")
    assert proc.returncode == 0, proc.stderr
    tree = ast.parse(proc.stdout)
    assert any(isinstance(n, ast.FunctionDef) and n.name == "backward" for n in tree.body)
    assert "from kernel import kb_backward" in proc.stdout and "return [grad_x, grad_w]" in proc.stdout
    proc = kbench(tmp_path / "home", "glue", "softmax", "--lang", "triton", "--json")
    assert json.loads(proc.stdout)["lang"] == "triton"
    assert json.loads(proc.stdout)["declaration"].startswith("def kb_forward(")


def test_eval_of_a_triton_candidate_without_a_gpu_is_an_import_check_in_the_jail(tmp_path):
    home = tmp_path / "home"
    proc = kbench(home, "eval", "llama_rmsnorm", str(FIXTURE), "--json", env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 3, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["format"] == "triton"
    assert _verdict(report, "static")["status"] == "pass", _verdict(report, "static")
    compiled = _verdict(report, "compile")
    assert compiled["status"] == "pass" and "Triton" in compiled["reason"] and "first launch" in compiled["reason"]
    assert _verdict(report, "correctness")["status"] == "skipped"
    # the second evaluation reads the build from the cache
    again = json.loads(kbench(home, "eval", "llama_rmsnorm", str(FIXTURE), "--json",
                              env={"CUDA_VISIBLE_DEVICES": ""}).stdout)
    assert again["build"]["cache_hit"] is True


def test_a_triton_candidate_that_does_not_import_fails_compile_and_its_import_is_jailed(tmp_path):
    cand = tmp_path / "cand"
    cand.mkdir()
    planted = tmp_path / "planted.txt"          # outside the jail: the import may not write it
    text = (FIXTURE / "kernel.py").read_text()
    text = text.replace("import triton\n", f"import triton\nopen({str(planted)!r}, 'w').write('x')\n", 1)
    (cand / "kernel.py").write_text(text)
    proc = kbench(tmp_path / "home", "eval", "llama_rmsnorm", str(cand), "--json", env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 1, proc.stderr[-2000:]
    compiled = _verdict(json.loads(proc.stdout), "compile")
    assert compiled["status"] == "fail" and "does not import" in compiled["reason"]
    assert "planted.txt" in compiled["reason"] and not planted.exists()
    # a syntax error is named with its line, before anything runs
    (cand / "kernel.py").write_text(text.replace("def kb_forward(x, w, eps, y, B, S, H):", "def kb_forward(x, w,:"))
    shutil.rmtree(tmp_path / "home" / ".cache", ignore_errors=True)
    proc = kbench(tmp_path / "home", "eval", "llama_rmsnorm", str(cand), "--json", env={"CUDA_VISIBLE_DEVICES": ""})
    report = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr[-2000:]
    static = _verdict(report, "static")
    assert static["status"] == "fail" and "does not parse: kernel.py:" in static["reason"]
