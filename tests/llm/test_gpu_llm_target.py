"""On a GPU machine the prompts' target names the GPU, its SMs and compute capability (asked in a child
process, so the session's own process never initialises CUDA), the driver, and the roofline cached for it."""

from __future__ import annotations

import json

import pytest

from engine.harness.roofline import cache_path
from engine.llm.target import probe


@pytest.mark.gpu
def test_probe_names_the_gpu_and_the_build():
    import torch
    # another test in this worker process may have brought CUDA up already; the claim is about probe() itself
    was_up = torch.cuda.is_initialized()
    t = probe()
    assert t.gpu and t.sms and t.capability and t.archs and any(f.startswith("-gencode") for f in t.nvcc_flags)
    text = t.describe()
    assert t.gpu in text and f"{t.sms} SMs" in text and f"compute capability {t.capability}" in text
    if t.capability == "9.0":
        assert "sm_90" in text    # the line says whether sm_90a (wgmma, setmaxnreg) is targeted
    assert torch.cuda.is_initialized() == was_up


@pytest.mark.gpu
def test_probe_tells_the_driver_and_the_roofline_cached_for_this_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path))
    t = probe()
    assert t.driver and t.cuda_runtime and t.nvcc_version and t.peaks is None
    text = t.describe()
    assert f"driver {t.driver}" in text and f"PyTorch built with CUDA {t.cuda_runtime}" in text
    assert "measured roofline: not measured on this GPU yet" in text
    path = cache_path(tmp_path, t.gpu)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"gpu": t.gpu, "copy_gbps": 4321.0, "fp32_tflops": 50.0, "tf32_tflops": 300.0,
                                "measured_at": 0.0}))
    assert "measured roofline of this GPU (`kbench roofline`): copy 4321 GB/s" in probe().describe()
