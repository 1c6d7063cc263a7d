"""What an exported package is built for and against: the GPUs (chosen at export, with PTX for the newest so
that later GPUs can run it), the torch it must be built with (the binary is tied to one torch release), and
the CUTLASS headers' package where the kernel includes CUTLASS or CuTe; and the values setup.py, pyproject.toml
and the README's install section are rendered with (`build_values`, `py_list`), shared by the op package and the
KernelBench ModelNew package. torch's version is read from its installed metadata, without importing it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
from pathlib import Path

from engine.export.errors import ExportError
from engine import cuda_home
from engine.harness.toolchain import DEFAULT_ARCHS, ToolchainError, parse_arch_list

# The CUTLASS/CuTe headers' package kbench builds with (pyproject.toml pins the same release).
CUTLASS_DIST = "nvidia-cutlass"
_CUTLASS_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?:cutlass|cute)/', re.M)


def export_archs(text: str | None = None) -> tuple[str, ...]:
    """The package's architectures: `text` (TORCH_CUDA_ARCH_LIST syntax, read by torch's rules) or kbench's
    DEFAULT_ARCHS, with PTX embedded for the newest: a GPU newer than all of them JIT-compiles that PTX instead
    of finding no kernel image (the PTX of an arch-specific target, 9.0a, runs on that architecture only)."""
    try:
        archs = list(parse_arch_list(text if text else ";".join(DEFAULT_ARCHS)))
    except ToolchainError as exc:
        raise ExportError(f"--arch: {exc}") from None
    if not archs[-1].endswith("+PTX"):
        archs[-1] += "+PTX"
    return tuple(archs)


def torch_version() -> str:
    """The public version of the torch kbench runs with (`2.14.1` for 2.14.1+cu130): what verified the kernel and
    what the package's README installs."""
    try:
        return importlib.metadata.version("torch").split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        raise ExportError("torch is not installed here; kbench export records the torch the kernel was verified "
                          "with.") from None


def cutlass_requirement() -> str:
    """`nvidia-cutlass==<the release installed with kbench>`."""
    try:
        return f"{CUTLASS_DIST}=={importlib.metadata.version(CUTLASS_DIST)}"
    except importlib.metadata.PackageNotFoundError:
        raise ExportError(f"the kernel includes CUTLASS/CuTe headers but {CUTLASS_DIST} is not installed with "
                          "kbench (pip install -e . installs it).") from None


def uses_cutlass(files: dict[str, str]) -> bool:
    """Whether any source includes a CUTLASS or CuTe header."""
    return any(_CUTLASS_INCLUDE.search(text) for text in files.values())


def build_values(archs: tuple[str, ...], files: dict[str, str]) -> dict[str, str]:
    """What setup.py, pyproject.toml and the README's Install section say about building a package of `files`
    (its kernels' sources) for `archs`: the GPUs, the torch, the CUDA toolkit (find_cuda_home's own source, so the
    package looks where kbench looks), CUTLASS."""
    torch = torch_version()
    cutlass = cutlass_requirement() if uses_cutlass(files) else ""
    source = Path(cuda_home.__file__).read_text()
    find = ast.get_source_segment(source, next(n for n in ast.parse(source).body
                                               if isinstance(n, ast.FunctionDef) and n.name == "find_cuda_home"))
    reqs = [f"torch=={torch}", "setuptools>=70.1", "ninja", "pytest", *([cutlass] if cutlass else [])]
    return {
        "archs": ";".join(archs), "torch_version": torch, "find_cuda_home": find,
        "cutlass_requirement": cutlass,
        "build_requires": ", ".join(f'"{r}"' for r in reqs[:2] + reqs[4:]),
        "install_requirements": " ".join(f'"{r}"' for r in reqs),
        "cutlass_words": f" and {cutlass} (the CUTLASS/CuTe headers the kernel includes)" if cutlass else "",
        "cutlass_line": (f"- **CUTLASS/CuTe**: the kernel includes their headers; the build takes them from the "
                         f"installed `{cutlass}` (its `cutlass_library/source/include`)." if cutlass else
                         "- **CUTLASS/CuTe**: not used by this kernel (where `nvidia-cutlass` is installed, its "
                         "headers are on the include path all the same, as in kbench's builds)."),
        "cutlass_doc": (f"- the CUTLASS/CuTe headers the kernel includes: the installed {cutlass} package's.\n"
                        if cutlass else ""),
    }


def py_list(extensions: list) -> str:
    """setup.py's EXTENSIONS: (module, sources, g++ flags, nvcc flags, link flags) per extension."""
    return "\n".join(["[", *(f"    {tuple(e)!r}," for e in extensions), "]"])
