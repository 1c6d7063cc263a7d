"""The build cache: cache_root/builds/<toolchain key>/<source hash>/ holds result.json (a BuildResult),
build.log, src/ and the .so. The entry paths, reading an entry, publishing one by renaming its temp dir into
place, and removing what killed builds left. Split from engine/harness/build.py.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path

from engine.candidates import Candidate
from engine.harness.build_diagnose import _full_log
from engine.harness.build_result import BuildResult
from engine.harness.build_steps import StepResult
from engine.harness.toolchain import Toolchain

STALE_TMP_S = 6 * 3600     # leftovers of killed builds older than this are removed on the next miss
_CACHEABLE_FAILURES = ("compile", "link", "invalid")  # same source, same toolchain -> same error


# ---------------------------------------------------------------------------- cache layout
def builds_dir(cache_root: Path, toolchain: Toolchain) -> Path:
    return Path(cache_root) / "builds" / toolchain.key()


def entry_path(cache_root: Path, toolchain_key: str, source_hash: str) -> Path:
    """Where a build of `source_hash` by the toolchain with `toolchain_key` lives in the cache."""
    return Path(cache_root) / "builds" / toolchain_key / source_hash


def entry_dir(cache_root: Path, toolchain: Toolchain, candidate: Candidate) -> Path:
    return entry_path(cache_root, toolchain.key(), candidate.source_hash)


def kernelbench_extensions_dir(cache_root: Path, candidate: Candidate, toolchain: Toolchain | None = None) -> Path:
    """TORCH_EXTENSIONS_DIR for a KernelBench candidate's load_inline, one per source hash (and toolchain)."""
    key = toolchain.key() if toolchain is not None else "any"
    return Path(cache_root) / "torch_extensions" / key / candidate.source_hash


def _read_entry(entry: Path) -> BuildResult | None:
    try:
        res = BuildResult.from_json(json.loads((entry / "result.json").read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None
    res.entry_dir = entry
    if res.so_path is not None:
        res.so_path = entry / res.so_path.name  # the entry was renamed into place after the build
        if not res.so_path.is_file():
            return None
    return res


def _clean_stale_tmp(parent: Path) -> None:
    now = time.time()
    try:
        with os.scandir(parent) as it:
            for e in it:
                if e.name.startswith((".tmp-", ".old-")) and now - e.stat().st_mtime > STALE_TMP_S:
                    shutil.rmtree(e.path, ignore_errors=True)
    except OSError:
        pass



def _publish(result: BuildResult, work: Path, entry: Path, steps: list[StepResult], force: bool) -> None:
    """Write result.json + build.log into the temp dir, then rename it to the entry (atomic on one fs)."""
    result.entry_dir = entry
    for obj in [*work.glob("*.o"), *work.glob("*.d")]:
        obj.unlink()  # the .so is all we keep; objects (in the object cache, if cacheable) only cost disk
    (work / "result.json").write_text(json.dumps(result.to_json(), indent=1))
    (work / "build.log").write_text(_full_log(steps))
    old = None
    if entry.exists() and force:
        old = entry.parent / f".old-{entry.name}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(entry, old)
        except OSError:
            old = None
    try:
        os.rename(work, entry)
    except OSError:  # an entry appeared meanwhile (a concurrent builder of the same source): keep theirs
        shutil.rmtree(work, ignore_errors=True)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)  # a sandbox that mapped the old .so keeps its mapping
