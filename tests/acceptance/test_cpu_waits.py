"""What a person sees on a machine without a GPU, where kbench would otherwise wait in silence: `kbench eval`
says at once that no GPU is visible (after compiling, without starting a judge), long builds say what they are
doing, and a KernelBench candidate's typo is reported in seconds. CUDA_VISIBLE_DEVICES="" hides any GPU, so
these run the same on a GPU machine."""

from __future__ import annotations

import json
import time

from tests.paths import REPO

KB = REPO / "tests" / "fixtures" / "kernelbench"
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}

# A ModelNew with no extension to build: its compile stage is its import, so no compiler runs here
TORCH_MODELNEW = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x * torch.sigmoid(x)
'''


def test_eval_without_a_gpu_says_so_in_one_line_and_starts_no_judge(user):
    cand = user.cwd / "swish_new.py"
    cand.write_text(TORCH_MODELNEW)
    args = ("eval", str(KB / "scaled_swish.py"), str(cand), "--override-static")
    t0 = time.monotonic()
    out = user.run(*args, env=NO_GPU, timeout=120)
    took = time.monotonic() - t0
    assert out.returncode == 3, out.stdout + out.stderr
    said = [ln for ln in out.stderr.splitlines() if "no CUDA GPU is visible" in ln]
    assert len(said) == 1 and "CUDA_VISIBLE_DEVICES" in said[0] and "no judge started" in said[0], out.stderr
    assert "judge + jailed runner" not in out.stderr
    assert "compile      PASS" in out.stdout and "COMPILED, NOT CHECKED" in out.stdout, out.stdout
    assert took < 30, f"{took:.1f} s"
    report = json.loads(user.run(*args, "--json", env=NO_GPU, timeout=120).stdout)
    assert not any(p.startswith("judge") for p in report["phases"]), report["phases"]
