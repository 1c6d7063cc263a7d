"""scripts/bench_corpus.py, the corpus run of BENCHMARKS.md (every KernelBench level 1-3 problem and every
robust-kbench task folder judged with its own reference as the candidate), over small checkouts laid out as the
upstream ones are. The judging is replaced here; tests/pipeline/test_gpu_corpus.py runs the script for real."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from tests.paths import FIXTURES, REPO

spec = importlib.util.spec_from_file_location("bench_corpus", REPO / "scripts" / "bench_corpus.py")
corpus = importlib.util.module_from_spec(spec)
sys.modules["bench_corpus"] = corpus
spec.loader.exec_module(corpus)

KB_PROBLEMS = {"level1": ["matmul_relu", "scaled_swish", "log_positive"], "level2": ["conv_transpose_tanh"],
               "level4": ["needs_package"]}
RKB_TASKS = ("linear", "pool", "batchnorm")


def kernelbench_checkout(root: Path) -> Path:
    for level, names in KB_PROBLEMS.items():
        (root / "KernelBench" / level).mkdir(parents=True)
        for i, name in enumerate(names, 1):
            shutil.copy(FIXTURES / "kernelbench" / f"{name}.py", root / "KernelBench" / level / f"{i}_{name}.py")
    return root


def robust_kbench_checkout(root: Path) -> Path:
    for name in RKB_TASKS:
        shutil.copytree(FIXTURES / "robust_kbench" / name, root / "tasks" / name)
    return root


@pytest.fixture
def fake_judge(monkeypatch):
    """The judging replaced: each problem's verdict from `verdicts` (default passed), every call noted."""
    calls: list[str] = []
    verdicts: dict[str, str] = {}

    def judged(problem, timeout_s):
        calls.append(corpus.key(problem))
        v = verdicts.get(problem["name"], "passed")
        return {**problem, "verdict": v, "reason": "" if v == "passed" else f"{v} because",
                "seconds": 1.0, "footprint": 3 << 20, "judge_peak": 6 << 20, "runner_peak": 9 << 20}
    monkeypatch.setattr(corpus, "judged", judged)
    return calls, verdicts


def test_a_run_judges_levels_1_to_3_once_each_and_goes_on_where_it_stopped(tmp_path, fake_judge, capsys):
    calls, verdicts = fake_judge
    checkout, out = kernelbench_checkout(tmp_path / "kb"), tmp_path / "results.jsonl"
    verdicts["2_scaled_swish"] = "unmeasured"
    assert corpus.main(["run", str(checkout), "--out", str(out), "--budget-s", "0"]) == 0
    assert calls == [] and "4 problem(s) left for the next run" in capsys.readouterr().out   # no budget: nothing
    assert corpus.main(["run", str(checkout), "--out", str(out)]) == 0
    assert calls == ["kernelbench/level1/1_matmul_relu", "kernelbench/level1/2_scaled_swish",
                     "kernelbench/level1/3_log_positive", "kernelbench/level2/1_conv_transpose_tanh"]
    assert len(out.read_text().splitlines()) == 4
    calls.clear()
    assert corpus.main(["run", str(checkout), "--out", str(out)]) == 0 and calls == []     # all done already
    verdicts.clear()
    assert corpus.main(["run", str(checkout), "--out", str(out), "--retry-unmeasured"]) == 0
    assert calls == ["kernelbench/level1/2_scaled_swish"]
    table = corpus.table([str(out)], 2)
    assert "| kernelbench/level1 | 3 | 3 | 0 | 0 | 0 |" in table and "| kernelbench/level2 | 1 | 1 | 0 | 0 | 0 |" in table
    assert "| (none) | | |" in table                   # the unmeasured one was judged again and passed
    assert "| kernelbench/level1/1_matmul_relu | 3 | 6 (2.00x) | 9 (3.00x) | 1 |" in table


def test_robust_kbench_task_folders_are_named_by_their_path_under_tasks(tmp_path, fake_judge):
    calls, verdicts = fake_judge
    checkout, out = robust_kbench_checkout(tmp_path / "rkb"), tmp_path / "rkb.jsonl"
    verdicts["pool"] = "failed"
    corpus.main(["run", str(checkout), "--out", str(out)])
    assert sorted(calls) == [f"robust-kbench/{n}" for n in sorted(RKB_TASKS)]
    assert "| robust-kbench/pool | failed | failed because |" in corpus.table([str(out)], 10)


def test_each_candidate_is_the_problems_own_reference(tmp_path):
    """The candidates the run judges compute exactly what the reference computes (here on the CPU)."""
    kb = kernelbench_checkout(tmp_path / "kb") / "KernelBench" / "level1" / "1_matmul_relu.py"
    mod = _module(corpus.candidate_for({"path": str(kb)}), tmp_path)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    torch.manual_seed(0)
    new = mod.ModelNew(*mod.get_init_inputs())
    x = mod.get_inputs()[0]
    assert torch.equal(new(x), model(x))
    rkb = robust_kbench_checkout(tmp_path / "rkb") / "tasks" / "linear"
    mod = _module(corpus.candidate_for({"path": str(rkb)}), tmp_path)
    assert mod.forward is mod.forward_fn and issubclass(mod.ModelNew, mod.Model)


def _module(cand, tmp_path: Path):
    (name, text), = cand.files.items()
    path = tmp_path / name
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_table_keeps_each_problems_latest_result(tmp_path):
    out = tmp_path / "r.jsonl"
    row = {"group": "kernelbench/level1", "name": "23_Softmax", "verdict": "unmeasured", "reason": "memory | ran out",
           "seconds": 30.0, "footprint": 12 << 30, "judge_peak": 30 << 30, "runner_peak": 36 << 30}
    out.write_text(json.dumps(row) + "\n" + json.dumps({**row, "verdict": "passed", "reason": ""}) + "\n")
    table = corpus.table([str(out)], 10)
    assert "| kernelbench/level1 | 1 | 1 | 0 | 0 | 0 |" in table and "memory / ran out" not in table
    assert "| kernelbench/level1/23_Softmax | 12,288 | 30,720 (2.50x) | 36,864 (3.00x) | 30 |" in table
