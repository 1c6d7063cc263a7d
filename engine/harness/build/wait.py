"""What a build is about to wait on, said before it starts: a wait of a minute or more in silence reads as a hang.

`expected_wait(candidate, cache_root, toolchain)` reads the cache (a build entry, the precompiled header's
files), builds nothing and runs no compiler, so the parent (the CLI, the loop, an executor) can say it before it
hands the build to a worker. None: a cache hit, or an ordinary compile of a few seconds that "compiling" covers.
"""

from __future__ import annotations

import re
from pathlib import Path

from engine.candidates import Candidate
from engine.harness.build.cache import _read_entry, entry_dir
from engine.harness.pch import pch_pending
from engine.harness.toolchain import Toolchain

PCH_WAIT = "building torch's precompiled header once, about a minute"
SINGLE_CU_WAIT = "compiling a single .cu with torch's headers under nvcc (no precompiled header), about a minute"
_BUILDS_EXTENSION = re.compile(r"load_inline|cpp_extension")


def kernelbench_wait(main: str) -> str:
    return f"building the extension {main} makes with load_inline (nvcc over torch's headers), a minute or more"


def cached(candidate: Candidate, cache_root: Path, toolchain: Toolchain) -> bool:
    """Whether a build of `candidate` by `toolchain` is in the cache (a failed one included)."""
    return _read_entry(entry_dir(cache_root, toolchain, candidate)) is not None


def expected_wait(candidate: Candidate, cache_root: Path, toolchain: Toolchain) -> str | None:
    """The long part of building `candidate`, in words, or None where there is none to announce."""
    if cached(candidate, cache_root, toolchain):
        return None
    if candidate.format in ("native", "kernel-only"):
        return PCH_WAIT if pch_pending(cache_root, toolchain) else None
    if candidate.format == "robust-kbench":
        return SINGLE_CU_WAIT
    if candidate.format == "kernelbench":   # its C++ half uses the precompiled header too (kernelbench_fast.py)
        main = candidate.main_file
        if not _BUILDS_EXTENSION.search(candidate.files.get(main, "")):
            return None
        first = f"{PCH_WAIT}, then " if pch_pending(cache_root, toolchain) else ""
        return first + kernelbench_wait(main)
    return None
