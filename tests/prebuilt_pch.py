"""Torch's precompiled header, built once per test run and hard-linked into the build cache of a test whose
subject is not the header.

kbench builds the header once per machine and toolchain (40 s on an idle 2-core box, up to 100 s under load);
a test with a cache of its own would build it again each time, which made a dozen jail and CLI tests cost
80-100 s each. A test that asks for `seed_pch(cache)` starts from a machine where kbench has run before, as most
users' machines are; the tests of the header itself (tests/acceptance/test_cpu_waits.py's fresh caches,
tests/harness) keep caches without it. Under xdist every worker shares one build: ensure_pch's file lock makes a
second worker wait for the first."""

from __future__ import annotations

import os
from pathlib import Path

_ROOT: Path | None = None
_ASKED = False              # the fixture ran: a seed without it would silently seed nothing
_BUILT_S: float | None = None


def none_here() -> None:
    """No toolchain on this machine (no nvcc): there is no header to seed, and kbench builds none either."""
    global _ASKED
    _ASKED = True


def build(root: Path) -> Path:
    """Build the header under `root` (once: later calls and other workers find it) for the toolchain a kbench
    subprocess of the tests detects, which is this process's environment's."""
    global _ROOT, _ASKED, _BUILT_S
    from engine.harness.pch import ensure_pch
    from engine.harness.toolchain import detect

    info = ensure_pch(root, detect())
    if info.error:
        raise RuntimeError(f"the tests' precompiled header: {info.error}")
    marker = root / "built-seconds"
    if info.built:
        marker.write_text(f"{info.seconds:.1f}\n")
    _ROOT, _ASKED, _BUILT_S = root, True, float(marker.read_text()) if marker.is_file() else None
    return root


def seed_pch(cache_root: Path) -> Path:
    """Hard-link the run's header into `cache_root/pch` (a kbench cache, as KBENCH_CACHE or XDG_CACHE_HOME/kbench
    names it). Links, not copies: hundreds of MB each, and kbench replaces a .gch by rename, never writes into
    one. Returns `cache_root`."""
    if not _ASKED:
        raise RuntimeError("ask for the `prebuilt_pch` fixture before seeding a cache with it")
    if _ROOT is None:
        return cache_root
    for src in (_ROOT / "pch").rglob("*"):
        if src.is_file() and not src.name.startswith(".lock"):
            dst = cache_root / src.relative_to(_ROOT)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if not dst.exists():
                os.link(src, dst)
    return cache_root


def built_seconds() -> float | None:
    """How long this run's header took to build (by this process or another worker): a measure of the machine's
    speed, as loaded as the tests find it. None where no header was built."""
    return _BUILT_S
