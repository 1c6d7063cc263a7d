"""The CUTLASS/CuTe headers on the include path of a KernelBench candidate's load_inline builds, as on every build.

A ModelNew builds its kernels itself, with torch.utils.cpp_extension.load_inline (or load), so kbench cannot pass
flags to nvcc: `add_include_path` wraps both functions so that each call's `extra_include_paths` ends with the
CUTLASS folder (engine.harness.vendor_libs.cutlass_include). Both imports of the candidate do it: the compile
stage's (engine/harness/kernelbench/compile.py), which builds, and the runner's (engine/pipeline/runner/main.py),
which reuses that build: torch's versioner hashes the include paths with the sources, so the two must ask for the
same ones or the runner would build again (engine/harness/kernelbench/prebuilt.py).

Never imports torch: the caller passes torch.utils.cpp_extension in.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from engine.harness.vendor_libs import cutlass_include


def add_include_path(cpp: Any, folder: str | None = None) -> str | None:
    """Wrap `cpp.load_inline` and `cpp.load` (torch.utils.cpp_extension) so that every call also searches `folder`
    (default: the CUTLASS headers; nothing is wrapped where there are none). The folder added, or None."""
    folder = folder or cutlass_include()
    if not folder:
        return None
    for name in ("load_inline", "load"):
        original = getattr(cpp, name)
        if getattr(original, "kbench_include", None) == folder:
            continue
        setattr(cpp, name, _with_include(original, folder))
    return folder


def _with_include(original: Any, folder: str) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        paths = bound.arguments.get("extra_include_paths") or []
        paths = [paths] if isinstance(paths, str) else list(paths)
        if folder not in paths:
            bound.arguments["extra_include_paths"] = [*paths, folder]
        return original(*bound.args, **bound.kwargs)

    call.kbench_include = folder  # type: ignore[attr-defined]
    return call
