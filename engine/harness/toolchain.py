"""How kbench compiles candidates: compilers, torch/CUDA/Python paths, target archs and the exact flags.

A `Toolchain` is a frozen description; `key()` hashes everything that affects object code, so build
caches (and the precompiled torch header) are keyed by it. `detect()` builds one from this machine.
Flags live here, next to the fields they derive from, so that a change to any of them changes the key.

Lazy imports: torch, only where a toolchain is detected or TORCH_CUDA_ARCH_LIST parsed (by torch's own
function): the CLI and the app load this module at start-up.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.harness import nvml
from engine.cuda_home import find_cuda_home
from engine.harness.vendor_libs import HEADERS as VENDOR_HEADERS
from engine.harness.vendor_libs import cutlass_include as cutlass_headers
from engine.harness.vendor_libs import wheel_dirs

# Bump when the flag recipes below change: it is part of key(), so old cache entries stop matching.
RECIPE_VERSION = 3     # 2: compilers jailed without /etc (entries built before may quote root-only files); 3: CUTLASS

DEFAULT_ARCHS = ("9.0",)          # portable: what an exported package builds for by default
# Candidates are built for the exact GPU that measures them: Hopper's and Blackwell's arch-specific
# instructions (wgmma, setmaxnreg, tcgen05) compile only for the `a` targets, which run on that arch only.
ARCH_SPECIFIC = {"9.0": "9.0a", "10.0": "10.0a", "10.3": "10.3a", "12.0": "12.0a"}
EVAL_DEFAULT_ARCHS = ("9.0a",)     # no GPU visible and no TORCH_CUDA_ARCH_LIST: the fleet's H100/H200
# Headers compiled into the precompiled header for binding.cpp. The CUDA ones are included because every
# native binding launches on at::cuda::getCurrentCUDAStream(); an unneeded include costs nothing.
PCH_HEADERS = ("torch/extension.h", "ATen/cuda/CUDAContext.h", "c10/cuda/CUDAGuard.h")
TORCH_LIBS = ("c10", "c10_cuda", "torch_cpu", "torch_cuda", "torch", "torch_python", "cudart")
# What torch adds for nvcc when torch headers are in a .cu (the half/bfloat16 operators clash with ATen's).
TORCH_NVCC_DEFINES = ("__CUDA_NO_HALF_OPERATORS__", "__CUDA_NO_HALF_CONVERSIONS__",
                      "__CUDA_NO_BFLOAT16_CONVERSIONS__", "__CUDA_NO_HALF2_OPERATORS__")
_CUDA_LIB_HEADERS = ("cublas_v2.h", "cublasLt.h", "cusparse.h", "cusolverDn.h")  # what CUDAContext.h needs
_ARCH = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")   # one entry of Toolchain.archs (parse_arch_list's)


class ToolchainError(RuntimeError):
    """The machine cannot compile candidates (no nvcc, no host compiler, bad TORCH_CUDA_ARCH_LIST)."""


@dataclass(frozen=True)
class Toolchain:
    cuda_home: str
    nvcc: str
    nvcc_version: str             # "13.0.88": nvcc's own release, may differ from torch's CUDA
    cxx: str                      # absolute path of the host C++ compiler (also nvcc's -ccbin)
    cxx_version: str
    cxx_is_gcc: bool              # the precompiled header is a GCC feature; other compilers build without
    torch_version: str
    cuda_version: str             # torch.version.cuda
    python_include: str
    ext_suffix: str               # e.g. ".cpython-311-x86_64-linux-gnu.so": the Python ABI we build for
    include_dirs: tuple[str, ...]  # torch, CUDA and (if present) the pip nvidia-* headers, in search order
    library_dirs: tuple[str, ...]
    defines: tuple[str, ...]      # torch's extension defines (without TORCH_EXTENSION_NAME: per module)
    cxx_std: str                  # the standard torch's headers require, e.g. "c++20"
    archs: tuple[str, ...]        # ("9.0",), ("8.0", "9.0a+PTX"), ...
    arch_source: str = field(default="default", compare=False)  # "env", "gpu" or "default"; not in key()
    # -O1: the glue is a few checks and libtorch calls (optimised already); -O2 costs ~1 s more per build
    # (g++ on binding.cpp dominates the split build), -O0 would leave inline tensor accessors as calls.
    host_opt: str = "-O1"
    kernel_std: str = "c++17"     # kernel.cu sees no torch headers
    # the pip nvidia-* header folders (cuBLAS, cuSPARSE, ...) beside torch, searched after the toolkit's own
    # by kernel.cu too, so an engineering-policy kernel that includes <cublas_v2.h> builds on a minimal toolkit
    vendor_include_dirs: tuple[str, ...] = ()
    # the CUTLASS/CuTe headers (vendor_libs.cutlass_include: the pinned nvidia-cutlass package), searched last by
    # every compile: a candidate's own CuTe code builds; "" where the package is not installed
    cutlass_include: str = ""
    # nvcc flags an evaluation mode adds to every nvcc run of a candidate (the upstream mode's --use_fast_math,
    # engine/pipeline/eval_mode.py); in key() only when set, so kbench's own builds keep their cache entries
    extra_nvcc: tuple[str, ...] = ()

    # ------------------------------------------------------------------ identity
    def key(self) -> str:
        """A short hash of everything that changes object code (not arch_source, which is provenance)."""
        data = asdict(self)
        data.pop("arch_source")
        if not data["extra_nvcc"]:
            data.pop("extra_nvcc")
        data["recipe"] = RECIPE_VERSION
        data["pch_headers"] = PCH_HEADERS
        data["libs"] = TORCH_LIBS
        blob = json.dumps(data, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def to_json(self) -> dict:
        return {**asdict(self), "key": self.key()}

    def describe(self) -> str:
        return (f"nvcc {self.nvcc_version} ({self.cuda_home}), {Path(self.cxx).name} {self.cxx_version}, "
                f"torch {self.torch_version} (CUDA {self.cuda_version}), archs {';'.join(self.archs)} "
                f"[{self.arch_source}], key {self.key()}")

    # ------------------------------------------------------------------ flags
    def gencode_flags(self) -> list[str]:
        flags: list[str] = []
        for arch in self.archs:
            major, minor, suffix, ptx = _ARCH.match(arch).groups()  # validated in parse_arch_list
            num = f"{major}{minor}{suffix}"
            flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
            if ptx:  # also embed PTX so newer GPUs can JIT it
                flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
        return flags

    def host_flags(self, module_name: str | None = None) -> list[str]:
        """g++ flags for binding.cpp and for the PCH. They must match exactly between the two, except for
        TORCH_EXTENSION_NAME, which no torch header reads (torch's own PCH support relies on the same)."""
        flags = [f"-std={self.cxx_std}", "-fPIC", self.host_opt]
        flags += [f"-D{d}" for d in self.defines]
        if module_name is not None:
            flags.append(f"-DTORCH_EXTENSION_NAME={module_name}")
        for inc in (*self.include_dirs, self.python_include):
            flags += ["-isystem", inc]
        return flags + self._cutlass_flags()

    def nvcc_kernel_flags(self) -> list[str]:
        """nvcc flags for a native kernel.cu: CUDA only, no torch headers, so no torch defines either."""
        flags = ["-O3", f"-std={self.kernel_std}", "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr",
                 "-lineinfo", "-ccbin", self.cxx, *self._abi_define(), *self.gencode_flags()]
        for inc in self.vendor_include_dirs:
            flags += ["-isystem", inc]
        return flags + self._cutlass_flags() + list(self.extra_nvcc)

    def _cutlass_flags(self) -> list[str]:
        return ["-isystem", self.cutlass_include] if self.cutlass_include else []

    def nvcc_torch_flags(self, module_name: str) -> list[str]:
        """nvcc flags for a single .cu that includes torch headers (robust-kbench): the slow path."""
        flags = ["-O3", f"-std={self.cxx_std}", "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr",
                 "-lineinfo", "-ccbin", self.cxx, *self.gencode_flags()]
        flags += [f"-D{d}" for d in (*self.defines, *TORCH_NVCC_DEFINES)]
        flags.append(f"-DTORCH_EXTENSION_NAME={module_name}")
        for inc in (*self.include_dirs, self.python_include):
            flags += ["-isystem", inc]
        return flags + self._cutlass_flags() + list(self.extra_nvcc)

    def link_flags(self) -> list[str]:
        # --no-undefined + --warn-unresolved-symbols: the linker reports every unresolved symbol of our
        # objects as a warning (Python's C API is legitimately among them: the interpreter provides it at
        # import), and the build turns any non-Python one into a clear error instead of an import failure.
        flags = ["-shared", "-Wl,--no-undefined", "-Wl,--warn-unresolved-symbols"]
        flags += [f"-L{d}" for d in self.library_dirs]
        flags += [f"-l{lib}" for lib in TORCH_LIBS]
        return flags

    def _abi_define(self) -> list[str]:
        # launchers may pass std types across the kernel.o / binding.o boundary: keep the ABI identical
        return [f"-D{d}" for d in self.defines if d.startswith("_GLIBCXX_USE_CXX11_ABI")]


# ---------------------------------------------------------------------- detection
def parse_arch_list(text: str) -> tuple[str, ...]:
    """TORCH_CUDA_ARCH_LIST as the installed torch reads it, by torch's own function
    (torch.utils.cpp_extension._get_cuda_arch_flags, which every torch extension build calls): entries separated
    by ';' or spaces, torch's named architectures expanded ('Hopper' is '9.0+PTX', 'Ampere' '8.0;8.6+PTX'),
    '+PTX' embedding PTX too, arch-specific targets ('9.0a') where torch supports them. Returned as kbench's
    entries, lowest first: 'Ampere;9.0a' -> ('8.0', '8.6+PTX', '9.0a'). What torch refuses (a comma, an
    unknown name) is a ToolchainError that quotes torch."""
    flags = _torch_arch_flags(text)
    targets: dict[str, bool] = {}                 # "90a" -> with PTX
    for flag in flags:
        m = re.fullmatch(r"-gencode=arch=compute_(\w+),code=(sm|compute)_(\w+)", flag)
        if m is None:
            raise ToolchainError(f"TORCH_CUDA_ARCH_LIST={text!r}: torch produced the flag {flag!r}, which kbench "
                                 "does not understand.")
        targets[m.group(1)] = targets.get(m.group(1), False) or m.group(2) == "compute"
    archs = []
    for num, ptx in targets.items():
        m = re.fullmatch(r"(\d+)(\d)([af]?)", num)
        if m is None:
            raise ToolchainError(f"TORCH_CUDA_ARCH_LIST={text!r}: compute_{num} is not a compute capability.")
        archs.append((int(m.group(1)), int(m.group(2)), m.group(3), ptx))
    if not archs:
        raise ToolchainError(f"TORCH_CUDA_ARCH_LIST={text!r} names no architecture.")
    return tuple(f"{major}.{minor}{suffix}{'+PTX' if ptx else ''}" for major, minor, suffix, ptx in sorted(archs))


_ENV_LOCK = threading.Lock()


def _torch_arch_flags(text: str) -> list[str]:
    """torch's gencode flags for TORCH_CUDA_ARCH_LIST=`text` (its function reads the variable itself, so it is
    set for the call, under a lock, and put back)."""
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)   # "No CUDA runtime is found"
    from torch.utils import cpp_extension

    if not text.strip() or text.strip() == "native":
        raise ToolchainError(f"TORCH_CUDA_ARCH_LIST={text!r} names no architecture (torch then asks the visible GPUs).")
    with _ENV_LOCK:
        saved = os.environ.get("TORCH_CUDA_ARCH_LIST")
        os.environ["TORCH_CUDA_ARCH_LIST"] = text.strip()
        try:
            return list(cpp_extension._get_cuda_arch_flags())
        except ValueError as exc:
            import torch

            raise ToolchainError(
                f"TORCH_CUDA_ARCH_LIST={text!r}: torch {torch.__version__} refuses it ({exc}). Entries are compute "
                "capabilities such as '9.0', '9.0a' or '8.0+PTX', or torch's named architectures (Ampere, Hopper, "
                "Blackwell, ...), separated by ';' or spaces.") from None
        finally:
            if saved is None:
                os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
            else:
                os.environ["TORCH_CUDA_ARCH_LIST"] = saved


def _visible_gpu_archs() -> tuple[str, ...]:
    """Compute capabilities of the GPUs this process may use, via NVML so that the calling process does not
    initialise CUDA (sandbox children fork from it); () without NVML. Honours a numeric CUDA_VISIBLE_DEVICES."""
    caps = {str(i): cap for i, cap in nvml.compute_capabilities().items()}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and re.fullmatch(r"[\d,\s]*", visible):
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        caps = {i: c for i, c in caps.items() if i in wanted}
    return tuple(sorted(set(caps.values()), key=lambda c: tuple(int(x) for x in c.split("."))))


def _version_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.strip() or "unknown"


def _torch_cxx_std(torch_include: Path) -> str:
    """torch >= 2.10 requires C++20 (torch/all.h #errors otherwise); older releases build with C++17."""
    all_h = torch_include / "torch" / "csrc" / "api" / "include" / "torch" / "all.h"
    try:
        text = all_h.read_text(errors="replace")
    except OSError:
        return "c++17"
    return "c++20" if "202002L" in text else "c++17"


def _pybind_abi_defines() -> list[str]:
    """The pybind11 ABI defines torch's extensions were built with; recent torch exposes none (empty)."""
    import torch

    flags = []
    for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
        value = getattr(torch._C, f"_PYBIND11_{name}", None)
        if value is not None:
            flags.append(f'PYBIND11_{name}="{value}"')
    return flags


def detect(cuda_home: str | None = None, cxx: str | None = None, archs: str | None = None) -> Toolchain:
    """Describe this machine's toolchain. Arguments override CUDA_HOME, CXX and TORCH_CUDA_ARCH_LIST; without
    them the toolkit is engine.cuda_home.find_cuda_home's (CUDA_HOME, CUDA_PATH, nvcc on PATH,
    /usr/local/cuda), as in the packages kbench exports."""
    import torch
    # Importing cpp_extension on a machine without a GPU logs "No CUDA runtime is found" to stderr: kbench says
    # that itself, and from a build worker the line lands on top of the app's screen.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    from torch.utils import cpp_extension

    if not cuda_home:
        cuda_home, how = find_cuda_home()
        if cuda_home is None:
            raise ToolchainError(f"no CUDA toolkit found ({how}): set CUDA_HOME to one (the folder with bin/nvcc).")
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    if not os.access(nvcc, os.X_OK):
        raise ToolchainError(f"nvcc not found at {nvcc}: set CUDA_HOME to a CUDA toolkit.")
    nvcc_out = _version_line([nvcc, "--version"])
    m = re.search(r"V(\d+\.\d+\.\d+)", nvcc_out)
    nvcc_version = m.group(1) if m else nvcc_out.splitlines()[-1]

    cxx_name = cxx or os.environ.get("CXX") or "g++"
    cxx_path = shutil.which(cxx_name)
    if cxx_path is None:
        raise ToolchainError(f"host C++ compiler {cxx_name!r} not found on PATH (set CXX).")
    cxx_path = os.path.realpath(cxx_path)
    cxx_version = _version_line([cxx_path, "-dumpfullversion", "-dumpversion"]).splitlines()[0]
    cxx_is_gcc = "clang" not in _version_line([cxx_path, "--version"]).lower()

    # Torch's own dirs from its helpers; CUDA's from our CUDA_HOME (torch guessed its own at import).
    try:
        torch_inc = cpp_extension.include_paths(device_type="cpu")
        torch_lib = cpp_extension.library_paths(device_type="cpu")
    except TypeError:  # torch < 2.5: include_paths(cuda: bool)
        torch_inc = cpp_extension.include_paths(False)
        torch_lib = cpp_extension.library_paths(False)
    cuda_lib = os.path.join(cuda_home, "lib64")
    if not os.path.isdir(cuda_lib):
        cuda_lib = os.path.join(cuda_home, "lib")
    include_dirs = [*torch_inc, os.path.join(cuda_home, "include")]
    # A minimal toolkit may lack cuBLAS/cuSPARSE headers that ATen/cuda/CUDAContext.h includes; the pip
    # nvidia-* wheels torch depends on carry them. Searched after the toolkit, so the toolkit wins.
    wheel_includes = wheel_dirs("include")
    include_dirs += [str(p) for p in wheel_includes if any((p / h).is_file() for h in _CUDA_LIB_HEADERS)]
    # kernel.cu may include any library the engineering policy allows (cuDNN, cuFFT, cuRAND, ...)
    vendor_include_dirs = [str(p) for p in wheel_includes
                           if any((p / h).is_file() for h in (*_CUDA_LIB_HEADERS, *VENDOR_HEADERS))]
    include_dirs = [d for d in dict.fromkeys(include_dirs) if d != "/usr/include"]  # gcc dislikes it
    library_dirs = [d for d in dict.fromkeys([*torch_lib, cuda_lib]) if d not in ("/usr/lib", "/usr/local/lib")]

    defines = ["TORCH_API_INCLUDE_EXTENSION_H",
               f"_GLIBCXX_USE_CXX11_ABI={int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))}",
               *_pybind_abi_defines()]

    env_archs = archs or os.environ.get("TORCH_CUDA_ARCH_LIST", "")
    if env_archs.strip() and env_archs.strip() != "native":   # "native": the visible GPUs, as torch reads it
        arch_tuple, source = parse_arch_list(env_archs), "env"
    elif gpu := _visible_gpu_archs():
        arch_tuple, source = tuple(ARCH_SPECIFIC.get(a, a) for a in gpu), "gpu"
    else:  # CPU-only build machines target the fleet's H100/H200
        arch_tuple, source = EVAL_DEFAULT_ARCHS, "default"

    return Toolchain(
        cuda_home=cuda_home, nvcc=nvcc, nvcc_version=nvcc_version,
        cxx=cxx_path, cxx_version=cxx_version, cxx_is_gcc=cxx_is_gcc,
        torch_version=torch.__version__, cuda_version=str(torch.version.cuda),
        python_include=sysconfig.get_path("include", scheme="posix_prefix"),
        ext_suffix=sysconfig.get_config_var("EXT_SUFFIX") or ".so",
        include_dirs=tuple(include_dirs), library_dirs=tuple(library_dirs), defines=tuple(defines),
        cxx_std=_torch_cxx_std(Path(torch_inc[0])), archs=arch_tuple, arch_source=source,
        vendor_include_dirs=tuple(d for d in dict.fromkeys(vendor_include_dirs) if d != "/usr/include"),
        cutlass_include=cutlass_headers() or "",
    )


def _main() -> None:  # python -m engine.harness.toolchain: print what detect() sees
    tc = detect()
    print(tc.describe())
    json.dump(tc.to_json(), sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    _main()
