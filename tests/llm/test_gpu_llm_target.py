"""On a GPU machine the prompts' target names the GPU, its SMs and compute capability (asked in a child
process, so the session's own process never initialises CUDA)."""

from __future__ import annotations

import pytest

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
