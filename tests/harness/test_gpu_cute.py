"""A CuTe candidate judged on a GPU, started as a user starts it: the installed `kbench eval` on the built-in
gelu_bias task with a kernel-only folder whose kernel.cu includes <cute/tensor.hpp> (the CUTLASS headers come from
the pinned nvidia-cutlass package, engine/harness/toolchain.py). It compiles, passes the static gate (CuTe in the
candidate's own kernel is not a library operator), correctness and integrity; the same kernel with a wrong constant
fails correctness, so the pass is the kernel's.

    python -m pytest -q -m gpu tests/harness/test_gpu_cute.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import FIXTURES, REPO

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

KBENCH = Path(sys.executable).parent / "kbench"
KERNEL = FIXTURES / "cute_gelu_bias" / "kernel.cu"


def _eval(tmp_path: Path, folder: Path) -> dict:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    proc = subprocess.run([str(KBENCH), "eval", "gelu_bias", str(folder), "--json", "--no-compile-baseline"],
                          cwd=tmp_path, text=True, capture_output=True, timeout=900,
                          env={**os.environ, "HOME": str(home), "KBENCH_CACHE": str(tmp_path / "cache")})
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _status(report: dict, stage: str) -> str:
    return next(v["status"] for v in report["verdicts"] if v["stage"] == stage)


@pytest.mark.parametrize("planted", [False, True], ids=["cute", "cute-wrong-constant"])
def test_a_cute_candidate_is_compiled_and_judged(tmp_path, planted):
    folder = tmp_path / "cand"
    folder.mkdir()
    text = KERNEL.read_text()
    assert "#include <cute/tensor.hpp>" in text
    (folder / "kernel.cu").write_text(text.replace("z * 0.5f *", "z * 0.6f *") if planted else text)
    report = _eval(tmp_path, folder)
    stages = {v["stage"]: (v["status"], v["reason"][:300]) for v in report["verdicts"]}
    assert _status(report, "static") == "pass" and _status(report, "compile") == "pass", stages
    if planted:
        assert _status(report, "correctness") == "fail", stages
    else:
        assert _status(report, "correctness") == "pass" and _status(report, "integrity") == "pass", stages
