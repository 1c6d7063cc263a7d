"""`kbench roofline`: measure (once per GPU, cached) the copy bandwidth and fp32/tf32 throughput."""

from __future__ import annotations

import argparse
import json

from engine.harness import nvml
from engine.harness.roofline import get_peaks
from engine.pipeline.eval_types import default_cache_root


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("roofline", help="measure this GPU's copy bandwidth and fp32/tf32 matmul throughput "
                                        "(cached per GPU model; kbench eval reports results against it)")
    p.add_argument("--remeasure", action="store_true", help="ignore the cache and measure again")
    p.add_argument("--gpu", type=int, default=None, help="GPU index")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_roofline)


def cmd_roofline(args: argparse.Namespace) -> int:
    try:
        peaks = get_peaks(default_cache_root(), None, remeasure=True, device=args.gpu) if args.remeasure \
            else get_peaks(default_cache_root(), _gpu_name(args.gpu), device=args.gpu)
    except RuntimeError as exc:
        print(f"kbench: {exc}")
        return 1
    if args.json:
        print(json.dumps(peaks.__dict__, indent=2))
    else:
        print(f"{peaks.gpu}: copy {peaks.copy_gbps:.0f} GB/s, fp32 {peaks.fp32_tflops:.1f} TFLOP/s, "
              f"tf32 {peaks.tf32_tflops:.1f} TFLOP/s  (ridge point {peaks.fp32_tflops * 1e3 / peaks.copy_gbps:.1f} "
              "flop/byte in fp32)")
    return 0


def _gpu_name(index: int | None) -> str | None:
    """The GPU's name without initialising CUDA in this process (NVML), so the cache can answer; None
    without NVML or for an index it does not know."""
    return nvml.gpu_name(index or 0)
