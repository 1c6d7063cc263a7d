"""The compiled timing helper (binding.cpp + kernel.cu here): built once per toolchain like any native
candidate, through the same cached, jailed build, and loaded by the runner (to call and time the candidate)
and by the judge (to time the baselines with the same loop and to check output fingerprints)."""

from __future__ import annotations

from pathlib import Path

from engine.candidates import Candidate
from engine.harness.build.result import BuildResult
from engine.harness.build.stage import build_candidate
from engine.harness.toolchain import Toolchain

HERE = Path(__file__).resolve().parent


def timer_candidate() -> Candidate:
    """The helper's sources as a native candidate: its source hash changes whenever the helper does."""
    files = {name: (HERE / name).read_text() for name in ("kernel.cu", "binding.cpp")}
    return Candidate("native", files, name="kbench-timer", meta={"kbench": "timing helper"})


def build_timer(cache_root: Path, toolchain: Toolchain, timeout_s: float = 900.0) -> BuildResult:
    """Build (or find in the cache) the helper. Raises RuntimeError with the compiler's message on failure:
    without it nothing can be measured, and the cause is kbench's or the machine's, not a candidate's."""
    res = build_candidate(timer_candidate(), cache_root, toolchain, timeout_s=timeout_s)
    if not res.ok:
        raise RuntimeError(f"kbench's timing helper did not build: {res.error}\n{res.log[-3000:]}")
    return res
