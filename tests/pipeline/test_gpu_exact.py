"""GPU: the judge's float64 second opinion, started as a user starts it: the installed `kbench eval` on the fixture
task tests/fixtures/cancelling_shift, whose float32 reference, (x + 1e4) - 1e4, rounds x to about 5e-4 against a
tolerance of 1e-5. A kernel that computes the value exactly passes and the correctness verdict says that only the
float64 reference took its calls; one that misses the exact value by 1e-3 fails. The CPU tests of the rule are
tests/pipeline/test_exact.py.

    python -m pytest -q -m gpu tests/pipeline/test_gpu_exact.py
"""

from __future__ import annotations

import json

import pytest

from engine.pipeline.judge.digest import FLOAT64_NOTE
from tests.installed import kbench
from tests.paths import FIXTURES

pytestmark = pytest.mark.gpu

TASK = FIXTURES / "cancelling_shift"


@pytest.mark.parametrize("candidate, passes", [("exact_copy", True), ("off_by_a_little", False)])
def test_a_kernel_exact_where_the_float32_reference_rounds_passes_on_the_float64_reference(tmp_path, candidate,
                                                                                           passes):
    proc = kbench(tmp_path / "home", "eval", str(TASK), str(TASK / candidate), "--json", "--no-compile-baseline",
                  "--no-timing", cwd=tmp_path, timeout=900, env={"KBENCH_CACHE": str(tmp_path / "cache")})
    assert proc.stdout.strip(), proc.stderr[-3000:]
    verdicts = {v["stage"]: v for v in json.loads(proc.stdout)["verdicts"]}
    corr = verdicts["correctness"]
    print(f"EXACT {candidate}: {corr['status']}: {corr['reason'][:400]}")
    if passes:
        assert corr["status"] == "pass" and FLOAT64_NOTE in corr["reason"], corr
        assert verdicts["integrity"]["status"] == "pass", verdicts["integrity"]
    else:
        assert corr["status"] == "fail" and "outside" in corr["reason"] and FLOAT64_NOTE not in corr["reason"], corr
