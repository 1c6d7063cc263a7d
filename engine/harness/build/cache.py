"""The build cache: cache_root/builds/<toolchain key>/<source hash>/ holds result.json (a BuildResult),
build.log, src/ and the .so. The entry paths, reading an entry, publishing one by renaming its temp dir into
place, and removing what killed builds left. Split from engine/harness/build/stage.py.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
import uuid
from pathlib import Path

from engine.candidates import Candidate
from engine.harness.build.diagnose import _full_log
from engine.harness.build.result import BuildResult
from engine.harness.build.steps import StepResult
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


def private_root(cache_root: Path) -> None:
    """The cache is the user's alone: its folder 0700 (made so, or made so again where an older kbench left it
    open), so no other user reaches a candidate's sources, objects, logs or the libraries the runner loads."""
    cache_root = Path(cache_root)
    cache_root.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = cache_root.stat()
    if st.st_uid == os.geteuid() and st.st_mode & 0o077:
        os.chmod(cache_root, 0o700)


def makedirs_private(path: Path) -> None:
    """`path` and any folder missing above it, each made 0700 (os.makedirs gives intermediate folders the
    default mode)."""
    missing = []
    p = Path(path)
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass


def make_private(folder: Path) -> None:
    """Every folder under `folder` 0700 and every file 0600 (links left as they are)."""
    for root, dirs, files in os.walk(folder):
        os.chmod(root, 0o700)
        for f in files:
            path = os.path.join(root, f)
            if not os.path.islink(path):
                os.chmod(path, 0o600)


def copy_private(src: Path, dst: Path) -> None:
    """Copy a folder a jailed step wrote into the cache, replacing what `dst` held: folders and regular files only
    (a link it planted is left out, never followed), each the user's alone (0700, 0600)."""
    makedirs_private(dst.parent)
    tmp = dst.with_name(f".tmp-{dst.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    shutil.copytree(src, tmp, symlinks=True,
                    ignore=lambda d, names: [n for n in names if not _plain(os.path.join(d, n))])
    make_private(tmp)
    old = dst.with_name(f".old-{dst.name}-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(dst, old)
    except FileNotFoundError:
        old = None
    os.rename(tmp, dst)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _plain(path: str) -> bool:
    st = os.lstat(path)
    return stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)


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
    make_private(work)
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
