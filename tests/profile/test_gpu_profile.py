"""The profile stage on a GPU: the layernorm forward baseline is memory-bound, the mnist_linear forward
baseline compute-bound, and the summary carries the figures behind it. Needs ncu with counter access
(skipped with ncu's reason otherwise; the torch profiler part is still checked)."""

from __future__ import annotations

import pytest

from engine.candidates import load_candidate
from engine.pipeline.profiling import profile_candidate
from engine.profile.runner import ProfileOptions
from engine.profile.summarise import ProfileSummary
from engine.tasks.loader import load_task
from engine.verdict import Status

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _peaks():
    from engine.cli.cmd_roofline import _gpu_name
    from engine.pipeline.eval_types import default_cache_root
    from engine.harness.roofline import get_peaks
    return get_peaks(default_cache_root(), _gpu_name(None))


@pytest.mark.parametrize("name, bottleneck", [("layernorm_lastdim", "memory"), ("mnist_linear", "compute")])
def test_baseline_profile_names_its_bottleneck(name, bottleneck):
    task = load_task(name)
    peaks = _peaks()
    verdict = profile_candidate(task, load_candidate(task.baseline_dir("forward")), "forward",
                                ProfileOptions(config="bench", launch_count=2), peaks=peaks)
    summary = ProfileSummary.from_json(verdict.data["summary"])
    assert summary.config == "bench"
    assert not verdict.data.get("torch_error"), verdict.data.get("torch_error")
    assert summary.torch_ops and summary.reference_ops            # the torch profiler part always runs
    assert all(o["device_us"] > 0 for o in summary.torch_ops)
    if verdict.status == Status.SKIPPED:
        pytest.skip(f"ncu part skipped: {verdict.reason}")
    assert verdict.status == Status.PASS
    m = summary.main
    assert not m.name.startswith("at::") and "flush" not in m.name
    assert summary.bottleneck == bottleneck, verdict.data["text"]
    assert m.duration_us and m.duration_us > 0
    assert m.memory_pct is not None and m.compute_pct is not None
    assert m.dram_gbps and 0 < summary.dram_fraction < 1.5
    assert m.registers_per_thread and m.registers_per_thread > 0
    assert m.shared_mem_per_block is not None
    assert m.achieved_occupancy_pct and 0 < m.achieved_occupancy_pct <= 100
    assert len(m.stalls) == 3 and all(v >= 0 for _, v in m.stalls)
    if bottleneck == "memory":
        assert m.memory_pct > m.compute_pct and summary.dram_fraction > 0.3
    else:
        assert m.compute_pct > m.memory_pct
        # a 3xTF32 tensor-core GEMM: ncu's fp32 instruction counts miss its work, the cost model does not
        assert summary.model_tflops and summary.compute_fraction and summary.compute_fraction > 0.05
        assert summary.model_tflops > 5 * (m.tflops or 0)
    text = verdict.data["text"]
    assert f"{bottleneck}-bound" in text and "registers/thread" in text and "top warp stalls" in text


def test_cli_profile_runs_on_a_baseline(capsys):
    from engine.cli import main
    task = load_task("layernorm_lastdim")
    rc = main(["profile", "layernorm_lastdim", str(task.baseline_dir("forward")), "--config", "bench", "--no-record"])
    out = capsys.readouterr().out
    assert rc in (0, 3) and "Profile (bench)" in out
