"""Object cache of the native split build: kernel.o and binding.o kept by content and flags, so a candidate that
changes only kernel.cu (the usual mutation) costs one nvcc run and a link, not another g++ run over torch's headers.

Layout: cache_root/objects/<toolchain key>/<object key>.o, one plain object file per key. The key
(`object_key`) is a sha256 over the compiled file's name, the names and bytes of every candidate file that could be
#included (all of the candidate's files but the other primary source: kernel.cu leaves out binding.cpp and
binding.cpp leaves out kernel.cu), the exact compiler command without its output paths (-o, -MF), the
toolchain key, and for binding.o the identity of the precompiled header (its bytes).

Leaving the other primary source out is what lets binding.o outlive a kernel change, so it is proved per object,
not assumed: each compile writes a dependency list (-MD -MF) and an object is published only when every file it
read inside the build folder is one its key covers (`unkeyed_inputs`). A binding.cpp that #includes kernel.cu
still builds, it just is not cached.

Only the trusted parent process touches this folder: `fetch` copies (never links: the jailed compilers may write
in the build folder) a cached object into the build folder before the jailed link; `publish` copies a freshly
compiled object in after its compile succeeded (tmp file + os.replace: readers never see half a file; two
builders of one key both publish valid objects and the last rename wins). The compilers' jail cannot read or
write it. An object that is not a sane relocatable ELF file is dropped at `fetch`; one that passes that check but
breaks the link is dropped by the build (`discard`), which compiles it fresh and links again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from engine.harness.build.cache import makedirs_private

KEY_VERSION = 1                      # bump when what goes into object_key changes
PRIMARY_SOURCES = ("kernel.cu", "binding.cpp")
OUTPUT_FLAGS = ("-o", "-MF")         # followed by a path in the build folder: not part of the key
STALE_TMP_S = 6 * 3600


def objects_dir(cache_root: Path, toolchain_key: str) -> Path:
    return Path(cache_root) / "objects" / toolchain_key


def object_path(cache_root: Path, toolchain_key: str, key: str) -> Path:
    return objects_dir(cache_root, toolchain_key) / f"{key}.o"


# ---------------------------------------------------------------------------- key
def keyed_files(files: Mapping[str, bytes], source: str) -> dict[str, bytes]:
    """The files whose bytes key the object of `source`: every candidate file but the other primary source."""
    leave_out = {p for p in PRIMARY_SOURCES if p != source} if source in PRIMARY_SOURCES else set()
    return {rel: data for rel, data in files.items() if rel not in leave_out}


def key_flags(cmd: Sequence[str]) -> list[str]:
    """The command as it shapes the object: without the paths after -o / -MF (they name the build folder)."""
    out: list[str] = []
    skip = False
    for arg in cmd:
        if skip:
            skip = False
        elif arg in OUTPUT_FLAGS:
            skip = True
        else:
            out.append(arg)
    return out


def object_key(source: str, files: Mapping[str, bytes], flags: Sequence[str], toolchain_key: str,
               pch: str = "") -> str:
    """sha256 (hex) of everything the object of `source` is made from. `files`: relative path -> bytes of the
    source and of every file it could #include; `flags`: `key_flags` of the compile command; `pch`: the
    precompiled header's identity (`pch_identity`), "" when none is used."""
    if source not in files:
        raise ValueError(f"{source!r} is not among the keyed files")
    manifest = {"v": KEY_VERSION, "toolchain": toolchain_key, "source": source, "flags": list(flags), "pch": pch,
                "files": {rel: hashlib.sha256(files[rel]).hexdigest() for rel in sorted(files)}}
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


_PCH_IDS: dict[tuple, str] = {}


def pch_identity(header: Path | None) -> str:
    """The precompiled header's identity: sha256 over the header and the .gch's own sha256. Hashing a .gch (most
    of a GB with torch) takes about a second, so its digest is kept beside it in <header>.gch.sha256 with the
    .gch's size, mtime, inode and ctime (ccache's pch_external_checksum, kept by kbench itself): a .gch is
    written whole and renamed into place once per toolchain, and a replaced or rewritten one no longer matches
    the stamp, so it is hashed again."""
    if header is None:
        return ""
    header = Path(header)
    gch, side = Path(f"{header}.gch"), Path(f"{header}.gch.sha256")
    st = gch.stat()
    stamp = f"{st.st_size} {st.st_mtime_ns} {st.st_ino} {st.st_ctime_ns}"  # ctime: no one can set it back
    memo = (str(gch), stamp)
    digest = _PCH_IDS.get(memo)
    if digest is None:
        try:
            recorded, _, rest = side.read_text().strip().partition(" ")
            digest = recorded if rest == stamp and re.fullmatch(r"[0-9a-f]{64}", recorded) else None
        except OSError:
            digest = None
        if digest is None:
            h = hashlib.sha256()
            with open(gch, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
            digest = h.hexdigest()
            tmp = side.with_name(f"{side.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            try:
                tmp.write_text(f"{digest} {stamp}\n")
                os.replace(tmp, side)
            except OSError:  # a read-only cache: hash again in the next process
                tmp.unlink(missing_ok=True)
        _PCH_IDS[memo] = digest
    return hashlib.sha256(header.read_bytes() + b"\0" + digest.encode()).hexdigest()


# ---------------------------------------------------------------------------- what the compile read
_DEP_TOKEN = re.compile(r"(?:\\.|[^\s\\])+")


def dep_paths(text: str) -> list[str]:
    """The prerequisites of a make rule as g++ / nvcc -MD write it ("obj.o : a.cu b.h \\\n c.h")."""
    text = text.replace("\\\n", " ")
    _, sep, rest = text.partition(": ")
    if not sep:
        return []
    out = []
    for tok in _DEP_TOKEN.findall(rest.split("\n", 1)[0]):
        out.append(re.sub(r"\\(.)", r"\1", tok).replace("$$", "$"))
    return out


def unkeyed_inputs(depfile: Path, src: Path, work: Path, keyed: Collection[str]) -> list[str] | None:
    """Files inside the build folder `work` that the compile read (its -MD list, paths relative to `src`, the
    compile's cwd) and the object's key does not cover; [] when the key covers every one. None when there is no
    readable dependency list (then nothing is proved and the object is not published)."""
    try:
        deps = dep_paths(depfile.read_text(errors="surrogateescape"))
    except OSError:
        return None
    if not deps:
        return None
    src_r, work_r = os.path.realpath(src), os.path.realpath(work)
    covered = {os.path.normpath(rel) for rel in keyed}
    missing = []
    for dep in deps:
        full = os.path.realpath(os.path.join(src_r, dep))
        if full != work_r and not full.startswith(work_r + os.sep):
            continue  # the toolkit, torch, the precompiled header: covered by the toolchain key and the PCH id
        rel = os.path.relpath(full, src_r)
        if rel.startswith(os.pardir) or rel not in covered:
            missing.append(os.path.relpath(full, work_r))
    return missing


# ---------------------------------------------------------------------------- store
def looks_like_object(data: bytes) -> bool:
    """A whole relocatable ELF file: the magic, ET_REL, and a section header table inside the file. Catches a
    truncated or zero-filled object (what a crash can leave after a rename); subtler damage shows at the link."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        return False
    end = "<" if data[5] == 1 else ">"
    if data[4] == 2:  # 64-bit
        e_type, = struct.unpack_from(end + "H", data, 16)
        shoff, = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
    else:
        e_type, = struct.unpack_from(end + "H", data, 16)
        shoff, = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
    return e_type == 1 and shnum > 0 and shentsize > 0 and shoff + shnum * shentsize <= len(data)


def fetch(cache_root: Path, toolchain_key: str, key: str, dest: Path) -> Path | None:
    """Copy the cached object of `key` to `dest`; its cache path on a hit, None on a miss. A cached file that is
    not a whole object is deleted and counts as a miss."""
    path = object_path(cache_root, toolchain_key, key)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not looks_like_object(data):
        discard(cache_root, toolchain_key, key)
        return None
    dest.write_bytes(data)
    return path


def publish(cache_root: Path, toolchain_key: str, key: str, obj: Path) -> Path | None:
    """Copy a freshly compiled object into the cache under `key` (atomically); its cache path, or None when it
    could not be stored (a full disk costs the next build a compile, never a wrong object)."""
    d = objects_dir(cache_root, toolchain_key)
    tmp = d / f".tmp-{key[:16]}-{os.getpid()}-{uuid.uuid4().hex[:8]}.o"
    try:
        data = obj.read_bytes()
        if not looks_like_object(data):
            return None
        makedirs_private(d)      # the cache is the user's alone
        _clean_stale_tmp(d)
        tmp.write_bytes(data)
        os.chmod(tmp, 0o600)     # the cache is the user's alone
        dest = object_path(cache_root, toolchain_key, key)
        os.replace(tmp, dest)
        return dest
    except OSError:
        tmp.unlink(missing_ok=True)
        return None


def discard(cache_root: Path, toolchain_key: str, key: str) -> None:
    object_path(cache_root, toolchain_key, key).unlink(missing_ok=True)


def _clean_stale_tmp(d: Path) -> None:
    now = time.time()
    try:
        with os.scandir(d) as it:
            for e in it:
                if e.name.startswith(".tmp-") and now - e.stat().st_mtime > STALE_TMP_S:
                    os.unlink(e.path)
    except OSError:
        pass
