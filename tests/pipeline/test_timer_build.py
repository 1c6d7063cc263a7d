"""The compiled timing helper (engine/pipeline/timer) builds with this machine's toolchain: a CPU-side check of a
change to binding.cpp or kernel.cu before any GPU runs it (the GPU suites load and run it)."""

from __future__ import annotations

import pytest

from engine.pipeline.timer import build_timer


@pytest.mark.slow
def test_the_timing_helper_builds(toolchain, native_cache_root):
    res = build_timer(native_cache_root, toolchain)
    assert res.ok and res.so_path.is_file(), res.error


@pytest.mark.slow
def test_the_helpers_fresh_inputs_are_the_judges_emulation_bit_for_bit(toolchain, native_cache_root):
    """The helper's fresh_args (its host path: the same factor code as the device kernel, kernel.cu) against
    engine/pipeline/judge/fresh.py's numpy emulation, which the CPU tests' stand-in helper uses: every mode, every
    floating-point dtype, a transposed tensor, and an integer tensor left as it is."""
    import torch

    from engine.harness.build.stage import load_extension
    from engine.pipeline.judge.fresh import SCALE, SIGN, SYMMETRIC, emulated

    res = build_timer(native_cache_root, toolchain)
    mod = load_extension(res.so_path, res.module_name)
    g = torch.Generator().manual_seed(3)
    square = torch.randn(2, 7, 7, generator=g)
    tensors = [torch.randn(5, 33, generator=g), torch.randn(64, generator=g).half(),
               torch.randn(3, 9, generator=g).bfloat16(), torch.randn(4, 4, generator=g).double(),
               square + square.transpose(-1, -2), torch.randn(6, 3, generator=g).t(),
               torch.randint(0, 2, (8,), generator=g).float() * 2 - 1, torch.arange(10)]
    modes = (SCALE, SCALE, SCALE, SCALE, SYMMETRIC, SCALE, SIGN, SCALE)
    alphas = (0.25, 0.5, 0.0625, 0.25, 0.5, 0.25, 0.0, 0.25)
    for seed in (0, 1, 0xFFFF_FFFF_FFFF_FFFF, 0x1234_5678_9ABC_DEF0):
        got = mod.fresh_args(tensors, seed, list(modes), list(alphas))
        want = emulated(tensors, seed, modes, alphas)
        for k, (a, b) in enumerate(zip(got, want)):
            assert a.dtype == b.dtype and torch.equal(a.reshape(-1), b.reshape(-1)), (seed, k)
    sym = mod.fresh_args([tensors[4]], 7, [SYMMETRIC], [0.5])[0]
    assert torch.equal(sym, sym.transpose(-1, -2)) and not torch.equal(sym, tensors[4])
    signs = mod.fresh_args([tensors[6]], 7, [SIGN], [0.0])[0]
    assert set(signs.tolist()) <= {-1.0, 1.0} and torch.equal(mod.fresh_args([tensors[7]], 7, [SCALE], [0.25])[0],
                                                             tensors[7])


@pytest.mark.slow
def test_the_built_helpers_run_takes_by_name_exactly_what_helper_call_gives(toolchain, native_cache_root):
    """The compiled module's own signature of `run` (pybind11's docstring), not binding.cpp's text: the one call
    (engine/pipeline/protocol/helper_call.py) names every argument it declares, the timing loop's as
    TimingParams' fields."""
    import re

    from engine.config.sections import TimingParams
    from engine.harness.build.stage import load_extension
    from engine.pipeline.protocol import messages as msg
    from engine.pipeline.protocol.helper_call import helper_arguments

    res = build_timer(native_cache_root, toolchain)
    mod = load_extension(res.so_path, res.module_name)
    signature = mod.run.__doc__.splitlines()[0]
    declared = re.findall(r"(\w+): ", signature[signature.index("(") + 1:signature.rindex(")")])
    given = helper_arguments(msg.Job(job=1, cid="c", mode="time", timing=TimingParams()), lambda: None, [], [])
    assert sorted(declared) == sorted(given), signature
