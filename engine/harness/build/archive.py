"""Move a compiled candidate between machines: pack a build-cache entry into bytes on the node that compiled
it, unpack it into another node's cache, where `build_candidate` then finds it as a cache hit.

The entry is keyed by the toolchain (engine.harness.toolchain.Toolchain.key) and the source hash, so an
archive only lands where the toolchain is the same; anywhere else the caller builds again. Unpacking goes
through a temp dir and a rename, like a local build, so a half-copied entry is never visible.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import uuid
from pathlib import Path

from engine.harness.build.cache import entry_path

MAX_ARCHIVE_BYTES = 256 * 1024 * 1024   # a candidate's .so is a few MB; anything near this is not one


def pack_entry(entry: Path) -> bytes:
    """The cache entry (result.json, build.log, the .so, src/) as a gzipped tar."""
    entry = Path(entry)
    if not (entry / "result.json").is_file():
        raise FileNotFoundError(f"{entry} is not a build-cache entry (no result.json)")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:   # .so files barely compress
        for path in sorted(entry.rglob("*")):
            if path.is_file() and not path.is_symlink():
                tar.add(path, arcname=str(path.relative_to(entry)), recursive=False)
    data = buf.getvalue()
    if len(data) > MAX_ARCHIVE_BYTES:
        raise ValueError(f"build entry {entry} packs to {len(data)} bytes, over {MAX_ARCHIVE_BYTES}")
    return data


def unpack_entry(data: bytes, cache_root: Path, toolchain_key: str, source_hash: str) -> Path:
    """Install an archive as the cache entry for (toolchain_key, source_hash); an entry already there wins.
    Returns the entry's path."""
    entry = entry_path(cache_root, toolchain_key, source_hash)
    if (entry / "result.json").is_file():
        return entry
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = entry.parent / f".tmp-{source_hash}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                if not member.isfile() or member.name.startswith("/") or ".." in Path(member.name).parts:
                    raise ValueError(f"build archive holds an unsafe member {member.name!r}")
            tar.extractall(tmp, filter="data")
        if not (tmp / "result.json").is_file():
            raise ValueError("build archive has no result.json")
        try:
            os.rename(tmp, entry)
        except OSError:     # another worker installed the same entry meanwhile: keep theirs
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return entry
