"""`kbench eval` of a Triton candidate on a GPU, through the installed kbench with a HOME of its own: the RMSNorm
kernel.py passes correctness on every llama_rmsnorm config (the odd widths and the 16387-wide rows included) and
is timed; the same kernel with its weight dropped fails correctness with the configs named. The runner compiles
the @triton.jit kernel inside its jail, at the first call."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.paths import FIXTURES
from tests.user_kbench import kbench

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
FIXTURE = FIXTURES / "triton" / "llama_rmsnorm_forward"


def _verdict(report: dict, stage: str) -> dict:
    return next(v for v in report["verdicts"] if v["stage"] == stage)


def test_a_triton_rmsnorm_passes_correctness_and_is_timed(tmp_path, gpu_to_itself):
    out = kbench(tmp_path / "home", "eval", "llama_rmsnorm", str(FIXTURE), "--json", "--no-compile-baseline",
                 timeout=1200)
    report = json.loads(out.stdout)
    assert out.returncode == 0, json.dumps(report["verdicts"])[:4000] + out.stderr[-2000:]
    assert report["format"] == "triton" and report["passed"] is True
    assert _verdict(report, "correctness")["status"] == "pass"
    assert _verdict(report, "integrity")["status"] == "pass"
    assert _verdict(report, "timing")["status"] in ("pass", "fail") and report["geomean_speedup_eager"]
    print("triton rmsnorm geomean speedup vs eager:", report["geomean_speedup_eager"])


def test_a_wrong_triton_rmsnorm_fails_correctness(tmp_path):
    cand = tmp_path / "wrong"
    cand.mkdir()
    text = (FIXTURE / "kernel.py").read_text()
    assert "x * rstd * w" in text
    (cand / "kernel.py").write_text(text.replace("x * rstd * w", "x * rstd"))
    out = kbench(tmp_path / "home", "eval", "llama_rmsnorm", str(cand), "--json", "--no-timing", timeout=1200)
    report = json.loads(out.stdout)
    assert out.returncode == 1, json.dumps(report["verdicts"])[:4000]
    assert _verdict(report, "correctness")["status"] == "fail"
    shutil.rmtree(cand)
