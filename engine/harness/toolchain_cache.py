"""The toolchain of an earlier run, kept on disk, so that `kbench eval` knows its build cache's key without
importing torch or running nvcc and g++ to ask their versions.

`detect()` (engine/harness/toolchain.py) imports torch (1-2 s, more on a GPU box where its CUDA libraries load)
and runs three version commands, only to describe a machine that rarely changes. `cached_toolchain` keeps its
answer under `<cache root>/toolchains/`, filed by a fingerprint of everything detect() reads that can change
between runs, each taken without running anything: the interpreter, the variables detect() honours (CUDA_HOME,
CUDA_PATH, CXX, TORCH_CUDA_ARCH_LIST, PATH), where the toolkit and the host compiler are and their files'
identity (size, mtime, inode), the installed torch's version file and its site-packages folder (whose mtime
moves whenever pip installs or removes a package), and, where the arch list comes from the GPUs, the visible
GPUs' compute capabilities (NVML, no CUDA context). A different fingerprint is a new file; a file that is
unreadable, or whose toolchain no longer hashes to the key it was written with, is detected again and replaced.

Only kbench's own process writes this folder (the build cache's rule): candidate code runs jailed, away from it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from engine.cuda_home import find_cuda_home
from engine.harness.toolchain import Toolchain, _visible_gpu_archs, detect

FOLDER = "toolchains"
_ENV = ("CUDA_HOME", "CUDA_PATH", "CXX", "TORCH_CUDA_ARCH_LIST", "PATH")


def _identity(path: str | None) -> list[Any] | None:
    """A file's identity as stat sees it (a reinstall changes it), or None where there is no such file."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino]


def fingerprint() -> dict[str, Any]:
    """What detect() reads that may change between runs, read without importing torch or running a compiler."""
    cuda_home, _ = find_cuda_home()
    torch_spec = importlib.util.find_spec("torch")      # where it is, without importing it
    torch_dir = Path(torch_spec.origin).parent if torch_spec is not None and torch_spec.origin else None
    arch_env = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    return {
        "python": [os.path.realpath(sys.executable), sys.version],
        "env": {k: os.environ.get(k) for k in _ENV},
        "nvcc": _identity(os.path.join(cuda_home, "bin", "nvcc")) if cuda_home else None,
        "cuda_version": _identity(os.path.join(cuda_home, "version.json")) if cuda_home else None,
        "cxx": _identity(shutil.which(os.environ.get("CXX") or "g++")),
        "torch": _identity(str(torch_dir / "version.py")) if torch_dir else None,
        "site": _identity(str(torch_dir.parent)) if torch_dir else None,
        "gpu_archs": list(_visible_gpu_archs()) if not arch_env or arch_env == "native" else None,
    }


def _load(path: Path) -> Toolchain | None:
    try:
        data = json.loads(path.read_text())
        names = {f.name for f in fields(Toolchain)}
        kept = {k: tuple(v) if isinstance(v, list) else v for k, v in data["toolchain"].items() if k in names}
        tc = Toolchain(**kept)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return tc if tc.key() == data.get("key") else None


def cached_toolchain(cache_root: Path) -> Toolchain:
    """This machine's toolchain: the one kept for this fingerprint, else detect()'s (then kept). A folder that
    cannot be written costs the next run a detect(), never this one its toolchain."""
    blob = json.dumps(fingerprint(), sort_keys=True, default=str).encode()
    path = Path(cache_root) / FOLDER / f"{hashlib.sha256(blob).hexdigest()[:32]}.json"
    if (tc := _load(path)) is not None:
        return tc
    tc = detect()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": tc.key(), "toolchain": tc.to_json()}, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass
    return tc
