"""The upstream mode as a user starts it: the installed `kbench` in a subprocess with a HOME of its own, on a
robust-kbench task folder laid out as upstream's (tests/fixtures/robust_kbench/linear), on this machine (no GPU:
the candidate is compiled, the command says what the mode will run and exits 3). And the message a KernelBench
problem that needs einops gives where it is not installed."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

from tests.paths import FIXTURES
from tests.prebuilt_pch import seed_pch
from tests.user_kbench import kbench, one_error_line

RKB = FIXTURES / "robust_kbench"


@pytest.mark.slow
def test_upstream_eval_of_a_robust_kbench_folder_says_what_it_runs(tmp_path, prebuilt_pch):
    task = tmp_path / "linear"
    shutil.copytree(RKB / "linear", task)
    cand = RKB / "candidates" / "linear_forward_correct.cu"
    home = tmp_path / "home"
    seed_pch(home / ".cache" / "kbench")      # a machine kbench has built on: the header is not this test's
    proc = kbench(home, "eval", str(task), str(cand), "--upstream", "--json", timeout=900)
    assert proc.returncode in (0, 1, 3), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    mode = report["mode"]
    assert mode["mode"] == "upstream" and mode["trials"] == 5 and mode["nvcc_flags"] == ["--use_fast_math"]
    assert list(mode["settings"]) == ["single", "multi-input", "multi-init", "multi"]
    assert len(mode["configs"]) == 13 and mode["timing_configs"] == ["all"]
    assert mode["numerics"]["cudnn_tf32"] is True and mode["seeds"] == "upstream"
    compile_v = next(v for v in report["verdicts"] if v["stage"] == "compile")
    assert compile_v["status"] == "pass", compile_v
    # the same in words, before the build (a cache hit now); the backward's settings are its own file's only
    text = kbench(home, "eval", str(task), str(cand), "--upstream", timeout=600)
    assert ("mode upstream: 5 trials per config; settings single (1), multi-input (2), multi-init (2), multi (8); "
            "13 configs, all timed; nvcc --use_fast_math") in text.stderr, text.stderr
    assert "upstream's trial seeds (42, then one randint per trial)" in text.stderr
    assert "mode upstream" in text.stdout
    # kbench's own mode: not said, and recorded as such
    own = kbench(home, "eval", str(task), str(cand), "--json", timeout=600)
    assert json.loads(own.stdout)["mode"]["mode"] == "kbench" and "mode upstream" not in own.stderr
    assert json.loads(own.stdout)["mode"]["seeds"] == "kbench"


def test_upstream_mode_config_key_is_checked(tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "kbench").mkdir(parents=True)
    (home / ".config" / "kbench" / "config.toml").write_text('[eval]\nmode = "robust"\n')
    proc = kbench(home, "eval", str(RKB / "linear"), str(RKB / "candidates" / "linear_forward_correct.cu"))
    assert proc.returncode == 2
    assert "[eval] mode: expected kbench or upstream, got 'robust'" in one_error_line(proc)


@pytest.mark.skipif(importlib.util.find_spec("einops") is not None, reason="einops is installed here")
def test_a_problem_that_needs_einops_names_the_extra_that_installs_it(tmp_path):
    problem = tmp_path / "48_Mamba2ReturnY.py"
    problem.write_text("import torch\nimport torch.nn as nn\nfrom einops import rearrange\n\n\n"
                       "class Model(nn.Module):\n    def forward(self, x):\n        return rearrange(x, 'a b -> b a')\n"
                       "\n\ndef get_inputs():\n    return [torch.randn(3, 5)]\n\n\n"
                       "def get_init_inputs():\n    return []\n")
    proc = kbench(tmp_path / "home", "show", str(problem))
    line = one_error_line(proc)
    assert proc.returncode == 2 and "kbench[kernelbench]" in line and "Mamba2" in line
    assert "level 4" not in line and "transformers" not in line
