"""GPU: scripts/bench_corpus.py for real, over small checkouts laid out as KernelBench's and robust-kbench's are:
every problem judged with its own reference as the candidate passes correctness and integrity, and the table
BENCHMARKS.md takes is printed (CORPUS-TABLE). The whole corpora run with the same script (docs in its header):

    python scripts/bench_corpus.py run KERNELBENCH_CHECKOUT --out kb.jsonl --budget-s 540
    python scripts/bench_corpus.py run ROBUST_KBENCH_CHECKOUT --all --out rkb.jsonl --budget-s 540
    python scripts/bench_corpus.py table kb.jsonl rkb.jsonl

    python -m pytest -q -m gpu tests/pipeline/test_gpu_corpus.py -rA -s
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.paths import REPO
from tests.pipeline.test_bench_corpus import kernelbench_checkout, robust_kbench_checkout

pytestmark = pytest.mark.gpu

SCRIPT = REPO / "scripts" / "bench_corpus.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=1500,
                          cwd=REPO)


@pytest.mark.parametrize("layout", ["kernelbench", "robust-kbench"])
def test_every_problem_of_a_checkout_passes_with_its_own_reference(tmp_path, layout):
    make = kernelbench_checkout if layout == "kernelbench" else robust_kbench_checkout
    checkout, out = make(tmp_path / layout), tmp_path / f"{layout}.jsonl"
    proc = _run("run", str(checkout), "--out", str(out), "--budget-s", "1200")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and all(r["verdict"] == "passed" for r in rows), [(r["name"], r["verdict"], r["reason"]) for r in rows]
    assert all(r["footprint"] and r["judge_peak"] and r["runner_peak"] for r in rows), rows
    table = _run("table", str(out))
    print(f"CORPUS-TABLE {layout}\n{table.stdout}")
    assert table.returncode == 0 and "| 0 | 0 | 0 |" in table.stdout
