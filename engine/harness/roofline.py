"""The GPU's measured ceilings (copy bandwidth, fp32 and tf32 matmul throughput) and the roofline.

Measured once per GPU model in a sandboxed child and cached as JSON, so every report can place a
result against what this card actually achieves rather than a datasheet. The same ceilings give each
config's physical floor: a time below it is not a win but a sign the kernel skipped work.

Lazy imports: torch, in the measuring child only; a parent reading cached peaks never loads it.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine import jsonable
from engine.errors import DataError
from engine.procs import run_child
from engine.tasks.model import Cost

FLOOR_MARGIN = 0.9  # measured ceilings are not the hardware's absolute limits: allow 10 %


@dataclass(frozen=True)
class Peaks:
    gpu: str
    copy_gbps: float        # device-to-device copy, bytes read + written per second / 1e9
    fp32_tflops: float      # SGEMM with TF32 disabled
    tf32_tflops: float
    measured_at: float

    @property
    def fp32_accurate_tflops(self) -> float:
        """The fastest fp32-accurate math a kernel can honestly do: SIMT fp32, or 3xTF32 on tensor cores
        (three TF32 products per fp32 product), whichever is higher. Using the SIMT rate alone would
        accuse every honest tensor-core kernel of skipping work."""
        return max(self.fp32_tflops, self.tf32_tflops / 3)

    def floor_ms(self, cost: Cost) -> float:
        """The least time the cost model allows: the larger of the memory and the compute bound."""
        return max(cost.bytes / (self.copy_gbps * 1e9), cost.flops / (self.fp32_accurate_tflops * 1e12)) * 1e3

    def fraction(self, cost: Cost, measured_ms: float) -> float:
        """Fraction of the roofline bound achieved (1.0 = at the measured ceiling)."""
        return self.floor_ms(cost) / measured_ms if measured_ms > 0 else 0.0

    def bound(self, cost: Cost) -> str:
        mem = cost.bytes / (self.copy_gbps * 1e9)
        comp = cost.flops / (self.fp32_accurate_tflops * 1e12)
        return "memory" if mem >= comp else "compute"


@dataclass
class RooflineResult:
    """What the measuring child writes (`finished` last: without it the child died on the way)."""
    finished: bool = False
    peaks: Peaks | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return jsonable.dump(self)

    @classmethod
    def from_json(cls, obj: Any, what: str = "the roofline child's result") -> "RooflineResult":
        return jsonable.load(cls, obj, what)


def _slug(gpu: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_") or "gpu"


def cache_path(cache_root: Path, gpu: str) -> Path:
    return Path(cache_root) / "roofline" / f"{_slug(gpu)}.json"


def load_peaks(cache_root: Path, gpu: str) -> Peaks | None:
    path = cache_path(cache_root, gpu)
    try:
        return Peaks(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def get_peaks(cache_root: Path, gpu: str | None = None, *, remeasure: bool = False,
              timeout_s: float = 300, device: int | None = None) -> Peaks:
    """Cached peaks for this GPU model, measuring them in a sandboxed child when missing."""

    if gpu and not remeasure and (cached := load_peaks(cache_root, gpu)):
        return cached
    outcome = run_child("engine.harness.roofline", {}, timeout_s=timeout_s, gpu=device)
    try:
        res = RooflineResult.from_json(outcome.result or {})
    except DataError as exc:   # kbench's own child: a result it cannot read is a bug, said as such
        raise RuntimeError(f"roofline measurement failed: {exc}") from None
    if outcome.crashed or res.error or res.peaks is None:
        raise RuntimeError(f"roofline measurement failed: {res.error or outcome.describe_crash()}")
    peaks = res.peaks
    path = cache_path(cache_root, peaks.gpu)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(peaks), indent=2))
    tmp.replace(path)
    return peaks


# -- measurement (runs in the child) ------------------------------------------------------------------

def _best_median_ms(fn: Any, iters: int, rounds: int = 3) -> float:
    """The best of several medians: a ceiling measured while something else shares the GPU would be too
    low, and a low ceiling raises the floor into false accusations."""
    return min(_median_ms(fn, iters) for _ in range(rounds))


def _median_ms(fn: Any, iters: int) -> float:
    import torch
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def measure() -> Peaks:
    import torch

    props = torch.cuda.get_device_properties(0)
    n = 256 << 20  # 1 GiB of fp32 per buffer: far beyond L2
    a = torch.empty(n, dtype=torch.float32, device="cuda").uniform_()
    b = torch.empty_like(a)
    copy_ms = _best_median_ms(lambda: b.copy_(a), 20)
    copy_gbps = 2 * a.numel() * 4 / (copy_ms * 1e-3) / 1e9
    a = b = None  # free 2 GiB before the matmuls
    m = 8192
    x = torch.randn(m, m, device="cuda")
    y = torch.randn(m, m, device="cuda")
    flops = 2 * m ** 3
    torch.backends.cuda.matmul.allow_tf32 = False
    fp32 = flops / (_best_median_ms(lambda: torch.mm(x, y), 10) * 1e-3) / 1e12
    torch.backends.cuda.matmul.allow_tf32 = True
    tf32 = flops / (_best_median_ms(lambda: torch.mm(x, y), 10) * 1e-3) / 1e12
    torch.backends.cuda.matmul.allow_tf32 = False
    return Peaks(gpu=props.name, copy_gbps=round(copy_gbps, 1), fp32_tflops=round(fp32, 2),
                 tf32_tflops=round(tf32, 2), measured_at=time.time())


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    out = Path(request["result_path"])
    try:
        import torch
        if not torch.cuda.is_available():
            result = RooflineResult(error="no CUDA GPU is visible")
        else:
            result = RooflineResult(peaks=measure())
    except Exception as exc:  # report, never hang the parent
        result = RooflineResult(error=f"{type(exc).__name__}: {exc}")
    result.finished = True
    out.write_text(json.dumps(result.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
