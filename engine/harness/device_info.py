"""What a measurement was taken on: GPU, driver, torch and CUDA versions."""

from __future__ import annotations

from typing import Any

from engine.harness import nvml


def gpu_info() -> dict[str, Any]:
    import torch  # lazy: the judge imports this module before it spawns its runner (engine/pipeline/judge_eval.py)

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

