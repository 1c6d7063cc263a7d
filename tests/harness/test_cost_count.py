"""A physical floor for every task format (engine/harness/cost_count.py): the reference's FLOPs counted by torch's
FlopCounterMode and its bytes from its inputs, weights and outputs, on the meta device (nothing allocated), where a
task brings no cost model; the timing verdict's floor uses it (a share of it, verdicts.COUNTED_SHARE), and
`kbench show` prints it for KernelBench problems, robust-kbench folders and user tasks."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from engine.harness.cost_count import counted_cost
from engine.harness.roofline import Peaks
from engine.harness.runtimes import runtime_for
from engine.pipeline import verdicts
from engine.pipeline.protocol.result import JudgeResult, TimingRow
from engine.tasks.loader import builtin_task_names, load_task
from engine.tasks.model import Cost
from tests.kbench_procs import run
from tests.paths import FIXTURES, REPO

KBENCH = Path(sys.executable).with_name("kbench")


def test_counts_agree_with_the_hand_written_models_of_a_linear_layer():
    task = load_task("mnist_linear")
    cfg = task.configs[0]
    for d in ("forward", "backward"):
        got = counted_cost(runtime_for(task, d), cfg).cost
        model = cfg.cost[d]
        assert got.flops == pytest.approx(model.flops, rel=1e-3) and got.bytes == pytest.approx(model.bytes, rel=1e-3)


def test_a_count_never_exceeds_a_built_in_model_by_more_than_the_floors_share_allows():
    """Over every built-in task, direction and config: the counted FLOPs and bytes stay within 1 / COUNTED_SHARE of
    the task's own model, so a floor drawn from a count is never above the one the model gives."""
    worst = 0.0
    for name in builtin_task_names():
        task = load_task(name)
        for d in task.directions:
            rt = runtime_for(task, d)
            for cfg in task.configs:
                got, model = counted_cost(rt, cfg), cfg.cost.get(d)
                if got is None or model is None:
                    continue
                worst = max(worst, got.cost.flops / model.flops if model.flops else 0.0, got.cost.bytes / model.bytes)
    assert 1.0 <= worst <= 1 / verdicts.COUNTED_SHARE, worst


def test_a_kernelbench_problem_is_counted_on_the_meta_device_without_allocating_it():
    task = load_task(FIXTURES / "kernelbench" / "big_softmax.py")       # 1 GiB in, 1 GiB out
    got = counted_cost(runtime_for(task, "forward"), task.configs[0])
    assert got.cost.bytes == 2 * 4096 * 65536 * 4 and got.cost.flops == 0 and not got.note
    mm = load_task(FIXTURES / "kernelbench" / "matmul_relu.py")         # relu(Linear(200, 129)(x[37, 200]))
    got = counted_cost(runtime_for(mm, "forward"), mm.configs[0]).cost
    assert got.flops == pytest.approx(2 * 37 * 200 * 129, rel=0.01)
    assert got.bytes == 4 * (37 * 200 + 129 * 200 + 129 + 37 * 129)


def test_the_timing_floor_of_a_task_without_a_cost_model_comes_from_the_judges_count(monkeypatch, tmp_path):
    task = load_task(FIXTURES / "kernelbench" / "big_softmax.py")
    peaks = Peaks("gpu", copy_gbps=2000.0, fp32_tflops=50.0, tf32_tflops=400.0, measured_at=0.0)
    monkeypatch.setattr(verdicts, "get_peaks", lambda *a, **k: peaks)
    stats = {"median_ms": 0.3, "iqr_ms": 0.0, "mean_ms": 0.3, "min_ms": 0.3, "n": 100, "all_streams_ms": 0.3}
    result = JudgeResult.from_json({"device": {"gpu": "gpu"}, "timing": {"seed0": {"candidate": stats}}})
    result.cost["seed0"] = Cost(0.0, 2 * 2**30)
    roof = verdicts.roofline(result, task, "forward", tmp_path, None)
    # 2 GiB at 2000 GB/s is 1.07 ms; the floor is COUNTED_SHARE of it
    assert roof.floor_ms["seed0"] == pytest.approx(2 * 2**30 / 2e12 * 1e3 * verdicts.COUNTED_SHARE)
    assert isinstance(result.timing["seed0"], TimingRow)


@pytest.mark.skipif(not KBENCH.exists(), reason="the kbench console script is not installed beside this Python")
@pytest.mark.parametrize("task", ["kernelbench", "robust-kbench", "user"])
def test_kbench_show_prints_each_configs_flops_and_bytes_for_every_format(tmp_path, task):
    if task == "kernelbench":
        ref = FIXTURES / "kernelbench" / "matmul_relu.py"
    elif task == "robust-kbench":
        ref = FIXTURES / "robust_kbench" / "linear"
    else:   # a user's task folder without costs in its task.toml
        ref = tmp_path / "mytask"
        shutil.copytree(REPO / "tasks" / "gelu_bias", ref, ignore=shutil.ignore_patterns("baselines"))
        toml = (ref / "task.toml").read_text()
        (ref / "task.toml").write_text("\n".join(ln for ln in toml.splitlines()
                                                 if not ln.strip().startswith(("flops", "bytes", "[configs.cost"))))
    out = run([str(KBENCH), "show", str(ref)], env={"HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [ln for ln in out.stdout.splitlines() if re.search(r"forward: [0-9.]+ [kMGT]?FLOP, [0-9.]+ [kMGT]?B", ln)]
    configs = load_task(ref).configs
    assert len(rows) == len(configs) and all("(counted" in ln for ln in rows), out.stdout
    js = json.loads(run([str(KBENCH), "show", str(ref), "--json"], env={"HOME": str(tmp_path)}).stdout)
    assert set(js["counted_costs"]) == {c.name for c in configs}
    assert all(v is None or v["bytes"] > 0 for per in js["counted_costs"].values() for v in per.values())


def test_show_counts_nothing_for_a_task_with_a_cost_model():
    from engine.cli.cmd_tasks import counted_costs
    assert counted_costs(load_task("layernorm")) == {}
