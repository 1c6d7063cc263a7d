"""The machine the candidates are built and measured for, as the prompts describe it: the GPU (name, SM
count, compute capability, memory), its measured roofline (engine.harness.roofline's cache: `kbench
roofline`), the CUDA toolkit, runtime and driver versions, and the nvcc flags a kernel.cu is compiled with
(without the folders they name: no path of the user's machine goes into a prompt).

The GPU is asked in a short child process (engine.harness.device_info), never in this one: the sandboxed
evaluators fork from the session's process and must not inherit an initialised CUDA context. The flags come
from engine.harness.toolchain (read only). A session asks once; tests pass a TargetInfo of their own.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from engine.config.env import cache_root
from engine.harness.roofline import Peaks, load_peaks
from engine.harness.toolchain import detect
from engine.llm.render import describe_peaks

log = logging.getLogger("kbench.llm")


@dataclass(frozen=True)
class TargetInfo:
    gpu: str | None = None             # "NVIDIA H100 80GB HBM3"; None: no GPU visible to kbench here
    capability: str | None = None      # "9.0"
    sms: int | None = None
    memory_gb: float | None = None
    archs: tuple[str, ...] = ()        # what kernels are built for ("9.0", "9.0a", ...)
    nvcc_flags: tuple[str, ...] = ()   # how kernel.cu is compiled (no paths: _flags_without_paths)
    note: str = ""                     # why something is unknown
    extra: dict[str, Any] = field(default_factory=dict)
    nvcc_version: str | None = None    # the toolkit kernel.cu is compiled with
    cuda_runtime: str | None = None    # the CUDA PyTorch is built with
    driver: str | None = None
    peaks: Peaks | None = None         # the GPU's measured roofline, where one is cached for it

    def describe(self) -> str:
        lines = []
        if self.gpu:
            bits = [f"compute capability {self.capability}" if self.capability else "",
                    f"{self.sms} SMs" if self.sms else "", f"{self.memory_gb:g} GB" if self.memory_gb else ""]
            lines.append(f"- GPU: {self.gpu} ({', '.join(b for b in bits if b)})")
        else:
            lines.append("- GPU: not visible where this session runs; candidates are measured on the GPU of the "
                         "machine that evaluates them" + (f" ({self.note})" if self.note else ""))
        if self.archs:
            lines.append(f"- kernels are built for: {', '.join(self.archs)}")
            if any(a.startswith("9.0a") for a in self.archs):
                lines.append("- sm_90a is targeted: Hopper's arch-specific instructions (wgmma.mma_async, "
                             "setmaxnreg) compile, as do TMA (cp.async.bulk) and thread-block clusters")
            elif any(a.startswith("9.0") for a in self.archs):
                lines.append("- the build targets sm_90, not sm_90a: wgmma.mma_async and setmaxnreg do not "
                             "compile; TMA (cp.async.bulk) and thread-block clusters do")
        if self.peaks is not None:
            lines.append(f"- measured roofline of this GPU (`kbench roofline`): {describe_peaks(self.peaks)}")
        elif self.gpu:
            lines.append("- measured roofline: not measured on this GPU yet (`kbench roofline` measures it; the first "
                         "timed evaluation does too)")
        else:
            lines.append("- measured roofline: unknown here (no GPU is visible where this session runs)")
        versions = [f"nvcc {self.nvcc_version}" if self.nvcc_version else "",
                    f"PyTorch built with CUDA {self.cuda_runtime}" if self.cuda_runtime else "",
                    f"driver {self.driver}" if self.driver else ("driver unknown here (no GPU visible)"
                                                                 if not self.gpu else "")]
        if any(versions):
            lines.append(f"- CUDA: {', '.join(v for v in versions if v)}")
        if self.nvcc_flags:
            lines.append(f"- kernel.cu is compiled with: `nvcc {' '.join(self.nvcc_flags)}`")
        return "\n".join(lines)


def flags_without_paths(flags: list[str] | tuple[str, ...], cxx: str = "") -> tuple[str, ...]:
    """nvcc's flags as a prompt may show them: no defines, no host compiler, no include folders (the toolkit's
    and the pip nvidia-* headers, which sit under the user's home or virtual environment)."""
    out: list[str] = []
    skip = False
    for f in flags:
        if skip:
            skip = False
            continue
        if f in ("-ccbin", "-isystem", "-I", "-L", "-o", "-include"):
            skip = True
            continue
        if f.startswith(("-D", "-I", "-L", "/", "~")) or (cxx and f == cxx) or "/" in f:
            continue
        out.append(f)
    return tuple(out)


def probe(timeout_s: float = 90.0) -> TargetInfo:
    """Ask a child process for the GPU, and the toolchain for the flags. Never raises."""
    info: dict[str, Any] = {}
    note = ""
    code = "import json; from engine.harness.device_info import gpu_info; print(json.dumps(gpu_info()))"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
        if out.returncode == 0 and out.stdout.strip():
            info = json.loads(out.stdout.strip().splitlines()[-1])
        else:
            note = (out.stderr.strip().splitlines() or ["the probe failed"])[-1][:200]
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        note = f"the GPU probe failed: {exc}"
    archs: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    nvcc_version = None
    try:
        tc = detect()
        archs = tuple(tc.archs)
        flags = flags_without_paths(tc.nvcc_kernel_flags(), tc.cxx)
        nvcc_version = tc.nvcc_version
    except Exception as exc:  # noqa: BLE001 - no toolchain here: the prompt says so, the session goes on
        note = note or f"no CUDA toolchain here ({exc})"
    gpu = info.get("gpu")
    return TargetInfo(gpu=gpu, capability=info.get("capability"), sms=info.get("sms"),
                      memory_gb=info.get("memory_gb"), archs=archs, nvcc_flags=flags, note=note,
                      nvcc_version=nvcc_version, cuda_runtime=info.get("cuda"), driver=info.get("driver"),
                      peaks=load_peaks(cache_root(), gpu) if gpu else None)
