"""`kbench check-task` on a CPU keeps to configs it can check in reasonable time: a config whose counted FLOPs are
beyond a CPU (a KernelBench 2048x2048 matmul: 17 GFLOP a call, in 48 MB) is skipped and says why, and a config whose first
seed is already slow is checked on that seed alone, with a warning saying so."""

from __future__ import annotations

from engine.harness.runtimes import runtime_for
from engine.integrity.check_task import CPU_MAX_FLOPS, check_config, check_task
from engine.tasks.loader import load_task
from tests.paths import FIXTURES

MATMUL_2048 = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(2048, 2048), torch.randn(2048, 2048)]


def get_init_inputs():
    return []
'''


def test_a_problem_whose_counted_flops_are_beyond_a_cpu_is_skipped_and_says_why(tmp_path):
    path = tmp_path / "matmul_2048.py"
    path.write_text(MATMUL_2048)
    rows = check_task(load_task(path), seeds=3, device="cpu")
    assert rows and all(not r.checked for r in rows)
    assert all(r.skipped.startswith("too slow for the CPU check: one call of the reference is 17 GFLOP (counted)")
               for r in rows), [r.skipped for r in rows]
    assert 2 * 2048**3 > CPU_MAX_FLOPS     # while its 48 MB pass the bytes bound


def test_a_config_whose_first_seed_is_slow_is_checked_on_that_seed_alone():
    task = load_task(FIXTURES / "kernelbench" / "matmul_relu.py")
    rt = runtime_for(task, "forward")
    row = check_config(rt, task.configs[0], "cpu", seeds=3, seed_budget_s=0.0)
    assert row.checked and row.seeds == 1
    assert row.warnings[0].startswith("checked on 1 of 3 seeds: one seed took"), row.warnings
    assert check_config(rt, task.configs[0], "cpu", seeds=3).seeds == 3      # no budget: every seed
