"""The compiled timing helper (engine/pipeline/timer) builds with this machine's toolchain: a CPU-side check of a
change to binding.cpp or kernel.cu before any GPU runs it (the GPU suites load and run it)."""

from __future__ import annotations

import pytest

from engine.pipeline.timer import build_timer


@pytest.mark.slow
def test_the_timing_helper_builds(toolchain, native_cache_root):
    res = build_timer(native_cache_root, toolchain)
    assert res.ok and res.so_path.is_file(), res.error
