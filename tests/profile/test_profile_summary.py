"""The profile stage on the CPU: ncu command line, CSV parsing and summaries of recorded ncu output, and the
`skipped` paths when ncu is missing or not permitted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine.harness.roofline import Peaks
from engine.profile import build_ncu_command, parse_ncu_csv, summarise
from engine.profile.ncu import SECTIONS, kernel_filter_regex, ncu_unavailable_reason
from engine.pipeline.profiling import ProfileJob, run_ncu
from engine.profile.runner import (
    ProfileOptions,
    profile_feedback,
    profile_verdict,
)
from engine.profile.summarise import ProfileSummary, classify
from engine.verdict import Status
from engine.workspace.note_entries import VerdictNote
from engine.workspace.views import fold
from tests.paths import FIXTURES

FIX = FIXTURES / "ncu"
PEAKS = Peaks("NVIDIA H100 80GB HBM3", copy_gbps=3000.0, fp32_tflops=51.0, tf32_tflops=120.0, measured_at=0.0)

JOB = ProfileJob(task={}, direction="forward", config="small")   # what run_ncu runs, for a fake ncu


def load(name: str):
    return parse_ncu_csv((FIX / name).read_text())


def test_command_line_has_sections_filter_and_launch_count():
    cmd = build_ncu_command(["python", "-m", "engine.pipeline.runner.profile_child", "req.json"], launch_count=2)
    assert cmd[:4] == ["ncu", "--csv", "--page", "details"]
    for s in ("Occupancy", "WarpStateStats", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis", "SpeedOfLight",
              "LaunchStats"):
        assert s in SECTIONS and cmd[cmd.index(s) - 1] == "--section"
    assert cmd[cmd.index("--launch-count") + 1] == "2"
    regex = cmd[cmd.index("--kernel-name") + 1]
    assert regex.startswith("regex:") and "flush" in regex
    assert "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio" in cmd[cmd.index("--metrics") + 1]
    assert cmd[cmd.index("--nvtx-include") + 1] == "kbench_candidate/"
    assert cmd[-4:] == ["python", "-m", "engine.pipeline.runner.profile_child", "req.json"]


def test_kernel_filter_excludes_flush_and_torch_kernels():
    import re
    pat = re.compile(kernel_filter_regex()[len("regex:"):])
    assert pat.match("layernorm_fwd_kernel")
    assert pat.match("sgemm_tiled_128x128")
    assert not pat.match("l2_flush_kernel")
    assert pat.match("my_reduce_kernel") and pat.match("fill_kernel")
    assert not pat.match("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>")


def test_parse_memory_bound_fixture():
    ks = load("layernorm_fwd_memory_bound.csv")
    assert [k.id for k in ks] == [0, 1]
    k = ks[0]
    assert k.short_name() == "layernorm_fwd_kernel"
    assert k.block == "(256, 1, 1)" and k.cc == "9.0"
    assert k.number("Registers Per Thread", "Launch Statistics") == 30
    assert k.number("Duration", "GPU Speed Of Light Throughput") == 154720   # thousands separator dropped
    assert k.get("Function Cache Configuration").value == "CachePreferNone"


def test_summary_memory_bound():
    s = summarise(load("layernorm_fwd_memory_bound.csv"), PEAKS, config="large")
    assert s.bottleneck == "memory"
    m = s.main
    assert m.name == "layernorm_fwd_kernel" and len(s.kernels) == 1      # two launches merged
    assert m.duration_us == pytest.approx(154.912, rel=1e-4)
    assert m.dram_gbps == pytest.approx(2924.6, rel=1e-3)
    assert s.dram_fraction == pytest.approx(m.dram_gbps / 3000.0)
    assert [r for r, _ in m.stalls] == ["long_scoreboard", "lg_throttle", "barrier"]
    assert m.registers_per_thread == 30 and m.shared_mem_per_block == 128
    assert m.achieved_occupancy_pct == pytest.approx(84.01) and m.theoretical_occupancy_pct == 100
    text = s.to_text()
    assert "memory-bound" in text and "long_scoreboard" in text and "30 registers/thread" in text
    assert "of measured copy bandwidth" in text


def test_summary_compute_bound():
    s = summarise(load("mnist_linear_fwd_compute_bound.csv"), PEAKS, config="batch1024")
    assert s.bottleneck == "compute"
    assert [k.name for k in s.kernels] == ["sgemm_tiled_128x128", "bias_relu"]   # by time
    m = s.main
    assert m.duration_us == pytest.approx(622.34)                             # usecond unit
    assert m.dram_gbps == pytest.approx(429.61)                               # Gbyte/second unit
    flops = 524_288 + 2 * 8_589_934_592
    assert m.tflops == pytest.approx(flops / 622.34e-6 / 1e12)
    assert s.compute_fraction == pytest.approx(m.tflops / PEAKS.fp32_accurate_tflops)
    assert m.stalls[0][0] == "math_pipe_throttle" and "selected" not in [r for r, _ in m.stalls]
    assert m.registers_per_thread == 128 and m.shared_mem_per_block == 32768
    assert s.kernels[1].dram_gbps == pytest.approx(2390.0)                    # Tbyte/second unit
    assert "compute-bound" in s.to_text() and "also: bias_relu" in s.to_text()


def test_cost_model_rate_counts_tensor_core_work():
    """A tensor-core GEMM issues few fp32 instructions: the useful-work rate comes from the task's cost model
    over the time of one call (every distinct kernel once), and sets the compute fraction."""
    kernels = load("mnist_linear_fwd_compute_bound.csv")
    plain = summarise(kernels, PEAKS, config="batch1024")
    flops = 40e9
    s = summarise(kernels, PEAKS, config="batch1024", flops=flops)
    call_s = sum(k.duration_us for k in s.kernels) * 1e-6
    assert s.model_tflops == pytest.approx(flops / call_s / 1e12)
    assert s.compute_fraction == pytest.approx(s.model_tflops / PEAKS.fp32_accurate_tflops)
    assert s.main.tflops == plain.main.tflops                 # the ncu count stays, labelled as CUDA-core
    text = s.to_text()
    assert "useful work" in text and "by the cost model" in text and "CUDA-core fp32" in text
    assert type(s).from_json(s.to_json()).model_tflops == s.model_tflops


def test_classify_latency_and_json_round_trip():
    assert classify(20.0, 30.0) == "latency"
    assert classify(None, None) == "latency"
    s = summarise(load("mnist_linear_fwd_compute_bound.csv"), None, torch_ops=[{"name": "k", "device_us": 3.0, "calls": 1}])
    assert s.dram_fraction is None and "of fp32 peak" not in s.to_text()
    back = ProfileSummary.from_json(s.to_json())
    assert back.to_text() == s.to_text()


def test_preamble_only_output_parses_to_nothing():
    assert parse_ncu_csv("==PROF== Connected to process 1\n==ERROR== something\n") == []


def test_ncu_missing_is_skipped_with_reason(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert "not found" in ncu_unavailable_reason()
    kernels, reason = run_ncu(JOB, ProfileOptions())
    assert kernels == [] and "not found" in reason
    s = summarise(kernels, PEAKS, torch_ops=[{"name": "layernorm_fwd_kernel", "device_us": 150.0, "calls": 1}],
                  ncu_skipped=reason)
    v = profile_verdict(s)
    assert v.status == Status.SKIPPED and "not found" in v.reason
    assert "candidate top device ops: layernorm_fwd_kernel" in v.data["text"]   # torch part still there


def _fake_ncu(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "ncu"
    exe.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write({body!r})\n")
    exe.chmod(0o755)
    return str(exe)


def test_ncu_permission_error_is_skipped(tmp_path):
    ncu = _fake_ncu(tmp_path, "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access "
                              "NVIDIA GPU Performance Counters on the target device 0.\n")
    kernels, reason = run_ncu(JOB, ProfileOptions(ncu=ncu, ncu_timeout_s=30))
    assert kernels == [] and "ERR_NVGPUCTRPERM" in reason


def test_ncu_output_is_parsed_from_the_run(tmp_path):
    ncu = _fake_ncu(tmp_path, (FIX / "layernorm_fwd_memory_bound.csv").read_text())
    kernels, reason = run_ncu(JOB, ProfileOptions(ncu=ncu, ncu_timeout_s=30))
    assert reason == "" and kernels[0].short_name() == "layernorm_fwd_kernel"


def test_profile_feedback_from_notes():
    s = summarise(load("layernorm_fwd_memory_bound.csv"), PEAKS)
    st = fold([VerdictNote(profile_verdict(s))])
    assert profile_feedback(st.stages) == s.to_text()
    assert profile_feedback({}) == ""


def test_mutate_feedback_reads_the_parents_profile_note(tmp_path, layernorm_task):
    from types import SimpleNamespace

    from engine.candidates import Candidate
    from engine.evolve.proposing import Proposing
    from engine.workspace import Workspace

    ws = Workspace.create(tmp_path / "ws")
    ws.start_session("ln", layernorm_task)
    rec = ws.commit_candidate("ln", Candidate("native", {"kernel.cu": "// k\n", "binding.cpp": "// b\n"}, "k", {}))
    fake = SimpleNamespace(_ws=ws)          # the proposing part reads only its workspace here
    assert Proposing._profile_feedback(fake, SimpleNamespace(id=rec.id)) == ""
    s = summarise(load("layernorm_fwd_memory_bound.csv"), PEAKS)
    ws.record_verdict(rec.id, profile_verdict(s))
    assert Proposing._profile_feedback(fake, SimpleNamespace(id=rec.id)) == s.to_text()
    assert Proposing._profile_feedback(fake, SimpleNamespace(id="nope")) == ""
    ws.close()


def test_cli_registers_profile_and_report():
    from engine.cli import build_parser
    p = build_parser()
    args = p.parse_args(["profile", "layernorm", "cand", "--config", "bench", "--no-record"])
    assert args.func.__name__ == "cmd_profile" and args.config == "bench"
    args = p.parse_args(["report", "ln", "--out", "r.md"])
    assert args.func.__name__ == "cmd_report" and args.out == "r.md"


def test_profile_stage_never_raises_and_passes_peaks(monkeypatch):
    from types import SimpleNamespace

    from engine.pipeline import profiling as runner

    seen = {}

    def fake(task, candidate, direction, opts, peaks=None, cache_root=None):
        seen.update(opts=opts, peaks=peaks, cache_root=cache_root)
        return profile_verdict(summarise(load("layernorm_fwd_memory_bound.csv"), peaks))

    monkeypatch.setattr(runner, "profile_candidate", fake)
    eo = SimpleNamespace(gpu=1, timing_configs=["bench"], cache_root=Path("/tmp/x"))
    peaks = {"gpu": "H100", "copy_gbps": 3000.0, "fp32_tflops": 51.0, "tf32_tflops": 120.0}
    v = runner.profile_stage(None, None, "forward", eo, peaks)
    assert v.status == Status.PASS and v.reason == "memory-bound"
    assert seen["opts"].gpu == 1 and seen["opts"].config == "bench" and seen["peaks"].copy_gbps == 3000.0
    assert "of measured copy bandwidth" in v.data["text"]

    def boom(*a, **k):
        raise RuntimeError("nvcc exploded")

    monkeypatch.setattr(runner, "profile_candidate", boom)
    v = runner.profile_stage(None, None, "forward", eo, None)
    assert v.status == Status.SKIPPED and "nvcc exploded" in v.reason


def test_profile_stage_is_on_by_default_and_configurable():
    from engine.config.load import load_config
    from engine.pipeline.eval_types import options_from_config as eval_options
    from engine.pipeline.eval_types import EvalOptions
    assert EvalOptions().profile is True and EvalOptions(profile=False).profile is False
    # sessions: "best" by default, so their evaluations leave the stage out (each new best is profiled alone)
    default = load_config(None, env={}, user_file="/nonexistent")
    assert default.eval.profile == "best" and eval_options(default).profile is False
    assert eval_options(load_config(None, {"eval.profile": "all"}, env={}, user_file="/nonexistent")).profile is True
    off = load_config(None, {"eval.profile": False}, env={}, user_file="/nonexistent")
    assert off.eval.profile == "off" and eval_options(off).profile is False


def test_ncu_that_cannot_start_is_skipped(tmp_path):
    kernels, reason = run_ncu(JOB, ProfileOptions(ncu=str(tmp_path / "no-such-ncu"), ncu_timeout_s=5))
    assert kernels == [] and "could not be started" in reason
