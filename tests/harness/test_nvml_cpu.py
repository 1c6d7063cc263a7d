"""The GPU queries go through NVML (pynvml), here a fake module: the values come from NVML, and where pynvml is
missing or NVML does not initialise every caller behaves as on a machine without a GPU. No GPU needed."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from engine.cli.cmd_roofline import _gpu_name
from engine.evolve.worker_fns import visible_gpus
from engine.harness import device_info, nvml
from engine.harness.toolchain import _visible_gpu_archs


class FakeNVMLError(Exception):
    pass


def fake_pynvml(gpus=(("NVIDIA H100 80GB HBM3", (9, 0)), ("NVIDIA A100-SXM4-40GB", (8, 0))),
                driver="570.86.15", init_error: bool = False) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVMLError = FakeNVMLError
    m.calls = []

    def init():
        m.calls.append("init")
        if init_error:
            raise FakeNVMLError("Driver Not Loaded")

    def handle(i):
        if not 0 <= i < len(gpus):
            raise FakeNVMLError("Invalid Argument")
        return i

    m.nvmlInit = init
    m.nvmlShutdown = lambda: m.calls.append("shutdown")
    m.nvmlSystemGetDriverVersion = lambda: driver
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = handle
    m.nvmlDeviceGetName = lambda h: gpus[h][0]
    m.nvmlDeviceGetCudaComputeCapability = lambda h: gpus[h][1]
    return m


@pytest.fixture
def no_cvd(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_values_are_read_from_nvml(monkeypatch, no_cvd):
    fake = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert nvml.driver_version() == "570.86.15"
    assert nvml.gpu_count() == 2
    assert nvml.compute_capabilities() == {0: "9.0", 1: "8.0"}
    assert _gpu_name(None) == "NVIDIA H100 80GB HBM3" and _gpu_name(1) == "NVIDIA A100-SXM4-40GB"
    assert _gpu_name(5) is None                               # an index NVML does not know
    assert visible_gpus() == [0, 1]
    assert _visible_gpu_archs() == ("8.0", "9.0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert _visible_gpu_archs() == ("8.0",)                   # a numeric CUDA_VISIBLE_DEVICES still applies
    assert visible_gpus() == [1]
    assert fake.calls == ["init", "shutdown"] * (len(fake.calls) // 2) and fake.calls   # each query balanced


def test_older_pynvml_bytes_are_decoded(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(gpus=((b"Tesla V100", (7, 0)),), driver=b"535.1"))
    assert nvml.driver_version() == "535.1" and nvml.gpu_name(0) == "Tesla V100"


def test_gpu_info_takes_the_driver_from_nvml(monkeypatch):
    import torch
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=132,
                            total_memory=80 * 2**30, L2_cache_size=50 * 2**20, uuid="GPU-1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    info = device_info.gpu_info()
    assert info["driver"] == "570.86.15" and info["gpu"] == "NVIDIA H100 80GB HBM3" and info["capability"] == "9.0"


@pytest.mark.parametrize("how", ["init fails", "not installed"])
def test_without_nvml_everything_answers_as_without_a_gpu(monkeypatch, no_cvd, how):
    # no driver / CI: nvmlInit raises; pynvml absent: the import fails (None in sys.modules)
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error=True) if how == "init fails" else None)
    assert nvml.driver_version() is None and nvml.gpu_count() == 0 and nvml.compute_capabilities() == {}
    assert _gpu_name(None) is None
    assert visible_gpus() == []
    assert _visible_gpu_archs() == ()


def test_init_failure_gives_the_no_gpu_toolchain(monkeypatch, no_cvd):
    """detect() without a visible GPU or TORCH_CUDA_ARCH_LIST falls back to the fleet's default archs."""
    from engine.harness import toolchain as T
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error=True))
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    try:
        tc = T.detect()
    except T.ToolchainError as exc:        # no nvcc on this machine: the arch choice is not reached
        pytest.skip(str(exc))
    assert tc.archs == T.EVAL_DEFAULT_ARCHS


def test_detect_builds_for_the_gpus_nvml_reports(monkeypatch, no_cvd):
    from engine.harness import toolchain as T
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(gpus=(("NVIDIA A100-SXM4-40GB", (8, 0)),)))
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    try:
        tc = T.detect()
    except T.ToolchainError as exc:
        pytest.skip(str(exc))
    assert tc.archs == ("8.0",)


def test_sm_use_by_process_takes_each_pids_highest_sample_since_the_time_asked():
    class NotFound(FakeNVMLError):
        pass
    fake = fake_pynvml()
    fake.NVMLError_NotFound = NotFound
    asked = []
    samples = [SimpleNamespace(pid=7, smUtil=40, timeStamp=2), SimpleNamespace(pid=7, smUtil=95, timeStamp=3),
               SimpleNamespace(pid=9, smUtil=0, timeStamp=3)]

    def utilisation(handle, since):
        asked.append((handle, since))
        if since > 100:
            raise NotFound("no sample since then")
        return samples
    fake.nvmlDeviceGetHandleByPciBusId = lambda bus: f"gpu@{bus.decode()}"
    fake.nvmlDeviceGetProcessUtilization = utilisation
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "pynvml", fake)
        assert nvml.sm_use_by_process("00000000:1B:00.0", 5) == {7: 95, 9: 0}
        assert asked == [("gpu@00000000:1B:00.0", 5)]
        assert nvml.sm_use_by_process("00000000:1B:00.0", 500) == {}      # NVML kept no sample since then
        fake.nvmlDeviceGetProcessUtilization = lambda h, s: (_ for _ in ()).throw(FakeNVMLError("Not Supported"))
        assert nvml.sm_use_by_process("00000000:1B:00.0", 5) is None      # cannot say: nothing is excused


def test_gpu_utilization_reads_each_gpus_rate_and_is_none_without_nvml(monkeypatch):
    """scripts/bench_evolve.py samples it for the GPU worker's busy share (nvidia-smi's utilization.gpu)."""
    fake = fake_pynvml()
    rates = {0: 97, 1: 3}
    fake.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=rates[h], memory=0)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert nvml.gpu_utilization() == {0: 97, 1: 3}
    assert nvml.gpu_utilization([1]) == {1: 3}
    assert nvml.gpu_utilization([7]) is None                   # an index NVML does not know
    assert fake.calls.count("init") == fake.calls.count("shutdown")
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error=True))
    assert nvml.gpu_utilization() is None


def test_queries_inside_held_share_one_initialisation(monkeypatch):
    """bench_evolve's sampler asks every 200 ms: inside `held` NVML stays initialised (NVML counts nvmlInit
    calls, so the queries' own init/shutdown pairs nest inside it); without pynvml or a driver it is a no-op."""
    fake = fake_pynvml()
    depth = []
    fake.nvmlInit = lambda: (fake.calls.append("init"), depth.append(1))
    fake.nvmlShutdown = lambda: (fake.calls.append("shutdown"), depth.pop())
    fake.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=50, memory=0)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    seen = []
    with nvml.held():
        for _ in range(3):
            assert nvml.gpu_utilization([0]) == {0: 50}
            seen.append(len(depth))
    assert seen == [1, 1, 1] and depth == []                   # held's init outlives every query's shutdown
    assert fake.calls.count("init") == 4 == fake.calls.count("shutdown")
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error=True))
    with nvml.held():
        assert nvml.gpu_utilization() is None
    monkeypatch.setitem(sys.modules, "pynvml", None)           # not installed
    with nvml.held():
        assert nvml.gpu_utilization() is None
