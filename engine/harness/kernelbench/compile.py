"""Compile-stage child for a KernelBench `ModelNew` file: `python -m engine.harness.kernelbench.compile REQ.json`.

A ModelNew file builds its kernels with `torch.utils.cpp_extension.load_inline` (or `load`) when it is imported,
so its compile stage is that import, run in a sandboxed child without a GPU. Every build call is recorded (its
extension name, and the compiler's output when it fails) and the result is written as JSON to the request's
`result_path`. The builds land in TORCH_EXTENSIONS_DIR; torch's versioner calls are recorded too, so the
runner's import reuses them (engine.harness.kernelbench.prebuilt).

With `record_sources` nothing is built: torch's load_inline still writes its sources (main.cpp with the pybind
module it generates, cuda.cu with its implicit headers), and its compile step is replaced by one that records
those files and the flags, and returns an empty module, so the import finishes. `kbench export` packages what
is recorded (engine/harness/kernelbench/sources.py).

Otherwise the C++ half of each build uses kbench's precompiled header where the request names one, and the
first failed compile ends the build (engine.harness.kernelbench.fast).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import traceback
import types
from pathlib import Path
from typing import Any, Callable

import torch
import torch.utils.cpp_extension as cpp

from engine.harness.kernelbench.child_types import CompileRequest, CompileResult, ExtensionBuild
from engine.harness.kernelbench.fast import fail_fast, use_pch
from engine.harness.kernelbench.includes import add_include_path
from engine.harness.kernelbench.prebuilt import recording_versioner
from engine.harness.runtimes.base import import_file


def _recording(original: Callable[..., Any], calls: list[ExtensionBuild], kind: str,
               skip: bool = False) -> Callable[..., Any]:
    """`original` (load_inline or load), each call recorded; with `skip`, recorded only (an empty module back)."""
    def build(*args: Any, **kwargs: Any) -> Any:
        name = kwargs.get("name", args[0] if args else "?")
        entry = ExtensionBuild(name=str(name), via=kind)
        calls.append(entry)
        if skip:
            entry.error = f"{kind} is not recorded"
            return types.ModuleType(str(name))
        try:
            module = original(*args, **kwargs)
        except BaseException as exc:
            entry.error = f"{type(exc).__name__}: {exc}"
            raise
        entry.ok = True
        return module
    return build


_FLAGS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths", "with_cuda")


def _recording_compile(calls: list[ExtensionBuild]) -> Callable[..., Any]:
    """A stand-in for torch's _jit_compile: the files and flags of the build the last load_inline/load call asked
    for go into that call's record; nothing is compiled; the module returned is empty."""
    signature = inspect.signature(cpp._jit_compile)

    def compile_step(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs).arguments
        entry = calls[-1] if calls else ExtensionBuild(name=str(bound.get("name")), via="?")
        for path in bound.get("sources") or []:
            with open(path, encoding="utf-8", errors="replace") as fh:
                entry.sources[os.path.basename(str(path))] = fh.read()
        entry.flags = {k: _plain(bound.get(k)) for k in _FLAGS}
        return types.ModuleType(str(bound.get("name")))
    return compile_step


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return value if value is None or isinstance(value, bool) else str(value)


def run_triton(request: CompileRequest) -> CompileResult:
    """A Triton candidate's compile stage on a machine without a GPU: its modules import (syntax, imports, the
    module-level code), the binding exports the direction's function and kernel.py its launcher; its @triton.jit
    kernels are listed. Triton compiles them at their first launch, in the runner."""
    from engine.harness.triton_load import jit_kernels, load_triton  # lazy: only the Triton mode needs it
    out = CompileResult()

    def load() -> None:
        binding = load_triton(Path(request.py_path), request.module_name)
        kernel = sys.modules[f"{request.module_name}_kernel"]
        if not callable(getattr(kernel, request.triton_launcher, None)):
            out.import_error = f"kernel.py defines no function {request.triton_launcher}"
        elif not callable(getattr(binding, request.triton_entry, None)):
            out.import_error = f"binding.py defines no function {request.triton_entry}"
        out.kernels = jit_kernels(kernel)
    return _imported(out, load)


def _imported(out: CompileResult, load: Callable[[], None]) -> CompileResult:
    """`out` after `load()` (the candidate's import): whatever it raises is the import's error; finished last."""
    try:
        load()
    except BaseException as exc:  # noqa: BLE001 - whatever the file raises is the verdict's reason
        out.import_error = f"{type(exc).__name__}: {exc}"
        out.traceback = traceback.format_exc(limit=8)[-4000:]
    out.cuda_available = bool(torch.cuda.is_available())
    out.finished = True
    return out


def run(request: CompileRequest) -> CompileResult:
    if request.triton_entry:
        return run_triton(request)
    out = CompileResult()
    recording_versioner(cpp.JIT_EXTENSION_VERSIONER, out.versions)
    if request.record_sources:
        cpp._jit_compile = _recording_compile(out.extensions)
    else:   # the CUTLASS/CuTe headers, as on every build (the runner's import adds the same, so nothing rebuilds)
        add_include_path(cpp)
    cpp.load_inline = _recording(cpp.load_inline, out.extensions, "load_inline")
    # record_sources: a load of files is refused by the export (they are not the candidate's), so it is not run
    cpp.load = _recording(cpp.load, out.extensions, "load", skip=request.record_sources)
    if not request.record_sources:
        fail_fast(cpp)       # ninja's first failed compile is the build's error, without waiting for the others
        if request.pch_header:
            use_pch(cpp, request.pch_header, list(request.pch_flags))

    def load() -> None:
        module = import_file(Path(request.py_path), request.module_name or "kbench_modelnew_compile")
        if not hasattr(module, "ModelNew"):
            out.import_error = "the file defines no class ModelNew"
    return _imported(out, load)


def main(argv: list[str]) -> int:
    request = CompileRequest.from_json(json.loads(Path(argv[0]).read_text()))
    result = run(request)
    Path(request.result_path).write_text(json.dumps(result.to_json(), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
