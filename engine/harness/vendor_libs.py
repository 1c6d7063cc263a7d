"""The vendor libraries a candidate's sources include, and the files to link them from; and where the CUTLASS/CuTe
headers are (`cutlass_include`), which every build has on its include path.

Under the `engineering` library policy a candidate may call cuBLAS, cuBLASLt, cuDNN, cuFFT, cuRAND,
cuSPARSE or cuSOLVER (engine/integrity/policy.py tags every use); under `pure` the static stage fails it
before any build. The link names the library file itself (`libcublas.so.13`, say): the pip wheels torch
depends on ship only versioned names, and a minimal toolkit may ship none. At import the library is the one
torch already loaded (same soname), so the candidate and torch share one cuBLAS.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

# header (as included) -> library name
HEADERS = {
    "cublas.h": "cublas", "cublas_v2.h": "cublas", "cublas_api.h": "cublas", "cublasXt.h": "cublas",
    "cublasLt.h": "cublasLt", "cudnn.h": "cudnn", "cufft.h": "cufft", "cufftXt.h": "cufft",
    "curand.h": "curand", "cusparse.h": "cusparse", "cusparse_v2.h": "cusparse", "cusolverDn.h": "cusolver",
    "cusolverSp.h": "cusolver", "cusolver_common.h": "cusolver",
}
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def libraries_used(files: dict[str, str]) -> list[str]:
    """Library names whose headers a candidate's sources include, in a stable order."""
    found = {HEADERS[Path(h).name] for text in files.values() for h in _INCLUDE.findall(text)
             if Path(h).name in HEADERS}
    return sorted(found)


def library_files(names: list[str], search: list[str]) -> tuple[list[str], list[str]]:
    """(files to link, names not found): for each name, `lib<name>.so` or the highest `lib<name>.so.N` in
    the first folder of `search` that has one."""
    files, missing = [], []
    for name in names:
        for d in search:
            folder = Path(d)
            exact = folder / f"lib{name}.so"
            if exact.is_file():
                files.append(str(exact))
                break
            versioned = sorted(folder.glob(f"lib{name}.so.*"),
                               key=lambda p: [int(x) if x.isdigit() else -1 for x in p.name.split(".so.")[1].split(".")])
            if versioned:
                files.append(str(versioned[-1]))
                break
        else:
            missing.append(name)
    return files, missing


def wheel_dirs(sub: str) -> list[Path]:
    """The `sub` folders (include, lib) of the nvidia-* wheels torch depends on, beside torch."""
    try:
        import torch  # lazy: heavy, and optional here (no wheels without it); the toolchain module imports this one
    except ImportError:
        return []
    site = Path(torch.__file__).resolve().parent.parent / "nvidia"
    return sorted(p for p in site.glob(f"*/{sub}") if p.is_dir())


def search_dirs(library_dirs: list[str]) -> list[str]:
    """The toolchain's library folders, then those of the nvidia-* wheels beside torch."""
    return [*library_dirs, *(str(p) for p in wheel_dirs("lib"))]


CUTLASS_PACKAGE = "cutlass_library"   # what the nvidia-cutlass wheel (a pinned dependency of kbench) installs
CUTLASS_REQUIREMENT = "nvidia-cutlass==4.2.0.0"   # pyproject.toml's pin (tests/harness/test_cutlass.py)


def cutlass_include() -> str | None:
    """The CUTLASS/CuTe header folder of the installed nvidia-cutlass package (cutlass_library/source/include,
    holding cute/ and cutlass/), found without importing the package; None where it is not installed. Header-only:
    a CuTe kernel the candidate writes needs nothing else, and CUTLASS's device-level operators are library calls
    the library policy rules on (engine/integrity/cpp/vocab.py, CUTLASS_LIBRARY)."""
    try:
        spec = importlib.util.find_spec(CUTLASS_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    folder = Path(spec.origin).parent / "source" / "include"
    return str(folder) if (folder / "cute" / "tensor.hpp").is_file() else None


_CUTLASS_MISS = re.compile(r"\b(cute|cutlass)/[\w./]+: No such file or directory")


def cutlass_hint(message: str) -> str:
    """What to do where a build could not find a CuTe/CUTLASS header because the pinned package is missing (an
    environment that installed kbench without its dependencies); "" otherwise, the header being the candidate's
    mistake."""
    if not _CUTLASS_MISS.search(message) or cutlass_include() is not None:
        return ""
    return (f" The CUTLASS/CuTe headers come from the {CUTLASS_REQUIREMENT} package, a dependency of kbench that is "
            f"not installed in this environment: pip install {CUTLASS_REQUIREMENT}.")
