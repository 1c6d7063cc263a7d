"""engine.harness.device_info.no_gpu_visible: "no GPU" only where that is certain (CUDA_VISIBLE_DEVICES hides
every GPU, or /dev has no GPU node and NVML counts none), and evaluate() then starts no judge."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.harness import device_info
from engine.pipeline import evaluate as ev
from engine.gpu_wait import NO_GPU
from engine.candidates import load_candidate
from engine.tasks.loader import load_task
from engine.verdict import Stage, Status


@pytest.fixture
def dev(tmp_path, monkeypatch):
    """An empty /dev, NVML that counts no GPU, no CUDA_VISIBLE_DEVICES."""
    d = tmp_path / "dev"
    d.mkdir()
    (d / "null").touch()
    monkeypatch.setattr(device_info.nvml, "gpu_count", lambda: 0)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return d


def test_no_device_node_and_no_nvml_gpu_is_no_gpu(dev):
    assert "NVML finds no GPU" in device_info.no_gpu_visible(dev=dev)


@pytest.mark.parametrize("node", ["nvidia0", "nvidia3", "dxg"])
def test_a_gpu_device_node_leaves_it_to_the_judge(dev, node):
    (dev / node).touch()
    assert device_info.no_gpu_visible(dev=dev) is None


def test_control_nodes_alone_are_not_a_gpu(dev):
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-modeset"):
        (dev / name).touch()
    assert device_info.no_gpu_visible(dev=dev) is not None


def test_nvml_seeing_a_gpu_leaves_it_to_the_judge(dev, monkeypatch):
    monkeypatch.setattr(device_info.nvml, "gpu_count", lambda: 1)
    assert device_info.no_gpu_visible(dev=dev) is None


@pytest.mark.parametrize("value", ["", " ", "-1", "-1,0"])
def test_cuda_visible_devices_that_hides_every_gpu_is_no_gpu(dev, monkeypatch, value):
    (dev / "nvidia0").touch()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert "CUDA_VISIBLE_DEVICES" in device_info.no_gpu_visible(dev=dev)
    assert device_info.no_gpu_visible(gpu=0, dev=dev) is None     # a pinned GPU replaces the variable


@pytest.mark.parametrize("value", ["0", "1,0", "GPU-8f6b2c1e"])
def test_cuda_visible_devices_naming_a_gpu_leaves_it_to_the_judge(dev, monkeypatch, value):
    (dev / "nvidia0").touch()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert device_info.no_gpu_visible(dev=dev) is None


def test_evaluate_without_a_gpu_compiles_and_starts_no_judge(monkeypatch, tmp_path):
    build = SimpleNamespace(ok=True, seconds=0.0, cache_hit=True, module_name="kb_x", so_path=tmp_path / "x.so",
                            error="", log="")
    monkeypatch.setattr("engine.harness.build.stage.build_candidate", lambda *a, **k: build)
    monkeypatch.setattr(ev, "no_gpu_visible", lambda gpu=None: "no GPU device in /dev")

    def judge(*a, **k):
        raise AssertionError("a judge was started")
    monkeypatch.setattr(ev, "_run_judge", judge)
    monkeypatch.setattr("engine.pipeline.timer.build_timer", judge)
    task = load_task("gelu_bias")
    said: list[str] = []
    report = ev.evaluate(task, load_candidate(task.baseline_dir("forward")), "forward",
                         ev.EvalOptions(cache_root=tmp_path, profile=False), progress=said.append)
    assert report.unmeasured == NO_GPU and report.judgement.not_checked
    assert report.verdict(Stage.COMPILE).status is Status.PASS
    for stage in (Stage.CORRECTNESS, Stage.TIMING):
        assert report.verdict(stage).status is Status.SKIPPED and report.verdict(stage).data["no_gpu"]
    assert "judge" not in report.phases
    assert any(m.startswith("no CUDA GPU is visible (no GPU device in /dev)") for m in said), said
