"""The machine the candidates are built and measured for, as the prompts describe it: the GPU (name, SM
count, compute capability, memory) and the nvcc flags a kernel.cu is compiled with.

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

from engine.harness.toolchain import detect

log = logging.getLogger("kbench.llm")


@dataclass(frozen=True)
class TargetInfo:
    gpu: str | None = None             # "NVIDIA H100 80GB HBM3"; None: no GPU visible to kbench here
    capability: str | None = None      # "9.0"
    sms: int | None = None
    memory_gb: float | None = None
    archs: tuple[str, ...] = ()        # what kernels are built for ("9.0", "9.0a", ...)
    nvcc_flags: tuple[str, ...] = ()   # how kernel.cu is compiled
    note: str = ""                     # why something is unknown
    extra: dict[str, Any] = field(default_factory=dict)

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
        if self.nvcc_flags:
            lines.append(f"- kernel.cu is compiled with: `nvcc {' '.join(self.nvcc_flags)}`")
        return "\n".join(lines)


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
    try:
        tc = detect()
        archs = tuple(tc.archs)
        flags = tuple(f for f in tc.nvcc_kernel_flags() if not f.startswith("-D") and f not in ("-ccbin", tc.cxx))
    except Exception as exc:  # noqa: BLE001 - no toolchain here: the prompt says so, the session goes on
        note = note or f"no CUDA toolchain here ({exc})"
    return TargetInfo(gpu=info.get("gpu"), capability=info.get("capability"), sms=info.get("sms"),
                      memory_gb=info.get("memory_gb"), archs=archs, nvcc_flags=flags, note=note)
