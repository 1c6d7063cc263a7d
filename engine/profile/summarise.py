"""ProfileSummary: what explains a kernel's speed, in a few lines a mutate / repair prompt can carry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine import jsonable
from engine.profile.ncu import FLOP_METRICS, STALL_METRIC, STALL_REASONS, NcuKernel

if TYPE_CHECKING:
    from engine.harness.roofline import Peaks

SOL = "GPU Speed Of Light Throughput"
LAUNCH = "Launch Statistics"
OCC = "Occupancy"
MEM = "Memory Workload Analysis"
LATENCY_BELOW_PCT = 40.0   # neither memory nor compute reaches this share of its peak: latency-bound

_TIME = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
         "second": 1.0, "s": 1.0}
_PREFIX = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def seconds(value: float, unit: str) -> float | None:
    f = _TIME.get(unit.strip())
    return value * f if f is not None else None


def bytes_per_second(value: float, unit: str) -> float | None:
    u = unit.strip()
    for suffix in ("byte/second", "byte/s", "B/s"):
        if u.endswith(suffix):
            f = _PREFIX.get(u[: -len(suffix)])
            return value * f if f is not None else None
    return None


def bytes_of(value: float, unit: str) -> float | None:
    u = unit.strip().split("/")[0]
    if u.endswith("byte"):
        f = _PREFIX.get(u[: -len("byte")])
        return value * f if f is not None else None
    return None


@dataclass
class KernelProfile:
    name: str
    duration_us: float | None
    memory_pct: float | None          # SOL memory throughput, % of peak
    compute_pct: float | None         # SOL compute (SM) throughput, % of peak
    dram_gbps: float | None
    tflops: float | None              # fp32 FLOP/s from fadd + fmul + 2*ffma, / 1e12
    registers_per_thread: float | None
    shared_mem_per_block: float | None  # bytes, static + dynamic
    achieved_occupancy_pct: float | None
    theoretical_occupancy_pct: float | None
    block: str = ""
    grid: str = ""
    stalls: list[tuple[str, float]] = field(default_factory=list)   # top reasons, warps per issue


@dataclass
class ProfileSummary:
    """The profile of a candidate on one config. `bottleneck`: memory, compute or latency (of the kernel
    that takes the most time); fractions are against the measured roofline when peaks are known."""

    bottleneck: str
    kernels: list[KernelProfile]
    config: str = ""
    gpu: str = ""
    dram_fraction: float | None = None       # achieved DRAM GB/s / measured copy GB/s
    # Useful work rate: the task's cost-model FLOPs of one call over the profiled kernels' time. Counts what
    # tensor cores do too (ncu's fadd/fmul/ffma counts, KernelProfile.tflops, see CUDA cores only).
    model_tflops: float | None = None
    compute_fraction: float | None = None    # model_tflops (else CUDA-core TFLOP/s) / fp32-accurate TFLOP/s
    torch_ops: list[dict[str, Any]] = field(default_factory=list)        # candidate: [{name, device_us, calls}]
    reference_ops: list[dict[str, Any]] = field(default_factory=list)
    ncu_skipped: str = ""                    # why there is no ncu part

    @property
    def main(self) -> KernelProfile | None:
        return self.kernels[0] if self.kernels else None

    def to_json(self) -> dict[str, Any]:
        return jsonable.dump(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any], what: str = "a profile verdict's summary") -> ProfileSummary:
        return jsonable.load(cls, obj, what)

    def to_text(self) -> str:
        lines = []
        head = f"Profile ({self.config})" if self.config else "Profile"
        m = self.main
        if m is None:
            lines.append(f"{head}: no ncu data" + (f" ({self.ncu_skipped})" if self.ncu_skipped else ""))
        else:
            lines.append(f"{head}: {self.bottleneck}-bound; main kernel {m.name}"
                         + (f" {_f(m.duration_us, '.1f')} us" if m.duration_us is not None else "")
                         + (f", grid {m.grid} block {m.block}" if m.grid else ""))
            lines.append(f"- speed of light: memory {_f(m.memory_pct, '.0f')}%, compute {_f(m.compute_pct, '.0f')}%")
            bw = f"- DRAM {_f(m.dram_gbps, '.0f')} GB/s"
            if self.dram_fraction is not None:
                bw += f" ({self.dram_fraction:.0%} of measured copy bandwidth)"
            if self.model_tflops is not None:
                bw += f"; useful work {self.model_tflops:.2f} TFLOP/s by the cost model"
                if self.compute_fraction is not None:
                    bw += f" ({self.compute_fraction:.0%} of the fp32-accurate peak)"
                bw += f"; CUDA-core fp32 {_f(m.tflops, '.2f')} TFLOP/s"
            else:
                bw += f"; fp32 {_f(m.tflops, '.2f')} TFLOP/s"
                if self.compute_fraction is not None:
                    bw += f" ({self.compute_fraction:.0%} of fp32 peak)"
            lines.append(bw)
            if m.stalls:
                lines.append("- top warp stalls (warps per issued instruction): "
                             + ", ".join(f"{r} {v:.2f}" for r, v in m.stalls))
            lines.append(f"- {_f(m.registers_per_thread, '.0f')} registers/thread, "
                         f"{_f(m.shared_mem_per_block, '.0f')} B shared memory/block, occupancy achieved "
                         f"{_f(m.achieved_occupancy_pct, '.0f')}% of theoretical {_f(m.theoretical_occupancy_pct, '.0f')}%")
            for k in self.kernels[1:4]:
                lines.append(f"- also: {k.name} {_f(k.duration_us, '.1f')} us")
        if self.torch_ops:
            lines.append("- candidate top device ops: " + _ops(self.torch_ops))
        if self.reference_ops:
            lines.append("- reference top device ops: " + _ops(self.reference_ops))
        return "\n".join(lines)


def _f(v: float | None, spec: str) -> str:
    return "?" if v is None else format(v, spec)


def _ops(ops: Sequence[dict[str, Any]]) -> str:
    return ", ".join(f"{o.get('name')} {float(o.get('device_us') or 0):.1f} us" for o in ops[:5])


def kernel_profile(k: NcuKernel, top_stalls: int = 3) -> KernelProfile:
    dur = k.get("Duration", SOL)
    duration_s = seconds(dur.value, dur.unit) if dur and isinstance(dur.value, float) else None
    mem_bw = k.get("Memory Throughput", MEM) or k.get("DRAM Throughput", MEM)
    dram = bytes_per_second(mem_bw.value, mem_bw.unit) if mem_bw and isinstance(mem_bw.value, float) else None
    counts = {key: k.number(metric) for key, metric in FLOP_METRICS.items()}
    flops = None
    if duration_s and any(v is not None for v in counts.values()):
        flops = (counts["fadd"] or 0) + (counts["fmul"] or 0) + 2 * (counts["ffma"] or 0)
    shared = 0.0
    have_shared = False
    for name in ("Static Shared Memory Per Block", "Dynamic Shared Memory Per Block"):
        sm = k.get(name, LAUNCH)
        if sm is not None and isinstance(sm.value, float):
            b = bytes_of(sm.value, sm.unit)
            if b is not None:
                shared += b
                have_shared = True
    stalls = [(r, v) for r in STALL_REASONS if (v := k.number(STALL_METRIC.format(r))) is not None]
    stalls = sorted((s for s in stalls if s[0] != "selected"), key=lambda s: -s[1])[:top_stalls]
    return KernelProfile(
        name=k.short_name(), duration_us=duration_s * 1e6 if duration_s is not None else None,
        memory_pct=k.number("Memory Throughput", SOL), compute_pct=k.number("Compute (SM) Throughput", SOL),
        dram_gbps=dram / 1e9 if dram is not None else None,
        tflops=flops / duration_s / 1e12 if flops is not None and duration_s else None,
        registers_per_thread=k.number("Registers Per Thread", LAUNCH),
        shared_mem_per_block=shared if have_shared else None,
        achieved_occupancy_pct=k.number("Achieved Occupancy", OCC),
        theoretical_occupancy_pct=k.number("Theoretical Occupancy", OCC),
        block=k.block, grid=k.grid, stalls=stalls)


def classify(memory_pct: float | None, compute_pct: float | None) -> str:
    mem, comp = memory_pct or 0.0, compute_pct or 0.0
    if max(mem, comp) < LATENCY_BELOW_PCT:
        return "latency"
    return "memory" if mem >= comp else "compute"


def summarise(kernels: Sequence[NcuKernel], peaks: Peaks | None = None, *, config: str = "",
              torch_ops: Sequence[dict[str, Any]] = (), reference_ops: Sequence[dict[str, Any]] = (),
              ncu_skipped: str = "", flops: float | None = None) -> ProfileSummary:
    """Merge repeated launches of a kernel (mean of each figure), order kernels by total time, classify
    the one that takes the most. `peaks`: an `engine.harness.roofline.Peaks` (or None). `flops`: the cost
    model's FLOPs of one call on this config, for the useful-work rate."""
    by_name: dict[str, list[KernelProfile]] = {}
    for k in kernels:
        p = kernel_profile(k)
        by_name.setdefault(p.name, []).append(p)
    merged = []
    for ps in by_name.values():
        m = _mean_profile(ps)
        merged.append((sum(p.duration_us or 0 for p in ps), m))
    merged.sort(key=lambda t: -t[0])
    profiles = [m for _, m in merged]
    main = profiles[0] if profiles else None
    bottleneck = classify(main.memory_pct, main.compute_pct) if main else "unknown"
    dram_fraction = compute_fraction = model_tflops = None
    call_us = sum(p.duration_us or 0.0 for p in profiles)      # one launch of each distinct kernel: one call
    if flops and call_us > 0:
        model_tflops = flops / (call_us * 1e-6) / 1e12
    if main and peaks is not None:
        if main.dram_gbps is not None and peaks.copy_gbps:
            dram_fraction = main.dram_gbps / peaks.copy_gbps
        rate = model_tflops if model_tflops is not None else main.tflops
        if rate is not None and peaks.fp32_accurate_tflops:
            compute_fraction = rate / peaks.fp32_accurate_tflops
    gpu = kernels[0].device if kernels else ""
    return ProfileSummary(bottleneck=bottleneck, kernels=profiles, config=config,
                          gpu=(peaks.gpu if peaks is not None else "") or gpu, dram_fraction=dram_fraction,
                          model_tflops=model_tflops, compute_fraction=compute_fraction, torch_ops=list(torch_ops),
                          reference_ops=list(reference_ops), ncu_skipped=ncu_skipped)


def _mean_profile(ps: list[KernelProfile]) -> KernelProfile:
    if len(ps) == 1:
        return ps[0]

    def mean(attr: str) -> float | None:
        vals = [getattr(p, attr) for p in ps if getattr(p, attr) is not None]
        return sum(vals) / len(vals) if vals else None

    first = ps[0]
    return KernelProfile(name=first.name, duration_us=mean("duration_us"), memory_pct=mean("memory_pct"),
                         compute_pct=mean("compute_pct"), dram_gbps=mean("dram_gbps"), tflops=mean("tflops"),
                         registers_per_thread=mean("registers_per_thread"),
                         shared_mem_per_block=mean("shared_mem_per_block"),
                         achieved_occupancy_pct=mean("achieved_occupancy_pct"),
                         theoretical_occupancy_pct=mean("theoretical_occupancy_pct"),
                         block=first.block, grid=first.grid, stalls=first.stalls)
