"""From a built candidate to the CandidateSpec the runner loads.

Shared by evaluate() (engine/pipeline/evaluate.py, which re-exports it) and the profiler
(engine/pipeline/profiling.py), which both build a candidate and then hand it to a jailed child; here so
that neither imports the other for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from engine.harness.build.cache import kernelbench_extensions_dir
from engine.pipeline.protocol.types import CandidateSpec

if TYPE_CHECKING:
    from engine.candidates import Candidate
    from engine.harness.build.result import BuildResult
    from engine.harness.toolchain import Toolchain


def candidate_spec(candidate: Candidate, build: BuildResult, cache_root: Path, toolchain: Toolchain) -> CandidateSpec:
    """What the runner loads: the built .so, the KernelBench .py and its load_inline build folder, or a Triton
    candidate's folder."""
    if candidate.format == "kernelbench":
        src_dir = candidate.write_to(cache_root / "candidates" / candidate.source_hash)
        return CandidateSpec(candidate.format, f"kb_modelnew_{candidate.source_hash}",
                             py_path=str(src_dir / candidate.main_file),
                             torch_extensions=str(kernelbench_extensions_dir(cache_root, candidate)))
    if candidate.format == "triton":   # kernel.py and binding.py, kept in the cache entry's src/ (build_triton.py)
        return CandidateSpec(candidate.format, build.module_name or f"kb_{candidate.source_hash}",
                             py_path=str(Path(build.entry_dir or "") / "src"))
    return CandidateSpec(candidate.format, build.module_name, so_path=str(build.so_path))
