"""What a measurement was taken on (GPU, driver, torch and CUDA versions), and whether any CUDA GPU can be
visible at all, decided without CUDA.

`no_gpu_visible` is the evaluation's fast path on a machine without a GPU (a laptop, a CI box, a login node):
starting a judge costs seconds (torch, the jailed runner) only for it to report that torch finds no GPU. It
answers from what the kernel and the environment say, so it creates no CUDA context and imports no torch, and
it says "none" only when that is certain; where it cannot tell, the judge decides as before.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from engine.harness import nvml

# The device nodes a CUDA driver creates: /dev/nvidia0, /dev/nvidia1, ... on Linux, /dev/dxg under WSL 2.
_DEV = Path("/dev")
_GPU_NODE = re.compile(r"nvidia\d+|dxg")


def gpu_info() -> dict[str, Any]:
    # lazy: the judge imports this module before it spawns its runner (engine/pipeline/judge/evaluation.py)
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": None}
    if not torch.cuda.is_available():
        return info
    idx = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    info.update(gpu=props.name, capability=f"{props.major}.{props.minor}", sms=props.multi_processor_count,
                memory_gb=round(props.total_memory / 2**30, 1),
                l2_mb=round(getattr(props, "L2_cache_size", 0) / 2**20, 1), driver=nvml.driver_version(),
                uuid=str(getattr(props, "uuid", "")) or None)   # tells two GPUs of one model apart
    return info


def no_gpu_visible(gpu: int | None = None, dev: Path = _DEV) -> str | None:
    """Why no CUDA GPU can be visible to a child started with `gpu` pinned (None: this process's
    CUDA_VISIBLE_DEVICES), or None where one may be. Cheap: an environment variable, a listing of /dev, and NVML
    only where /dev shows no GPU node (NVML creates no CUDA context)."""
    hidden = _hidden_by_env(os.environ.get("CUDA_VISIBLE_DEVICES") if gpu is None else str(gpu))
    if hidden:
        return hidden
    try:
        if any(_GPU_NODE.fullmatch(p.name) for p in dev.iterdir()):
            return None
    except OSError:
        return None   # cannot list /dev: not certain, the judge decides
    if nvml.gpu_count() > 0:   # a driver whose nodes live elsewhere (some containers): NVML still sees its GPUs
        return None
    return f"no GPU device in {dev} (nvidia0, dxg) and NVML finds no GPU"


def _hidden_by_env(value: str | None) -> str:
    """CUDA_VISIBLE_DEVICES hides every GPU when it is empty or starts with an id CUDA cannot take (-1): CUDA
    enumerates the listed devices up to the first invalid one."""
    if value is None:
        return ""
    first = value.split(",")[0].strip()
    if not first:
        return "CUDA_VISIBLE_DEVICES is empty, which hides every GPU"
    if re.fullmatch(r"-\d+", first):
        return f"CUDA_VISIBLE_DEVICES={value} hides every GPU"
    return ""
