"""Compile-stage child for a KernelBench `ModelNew` file: `python -m engine.harness.kernelbench_compile REQ.json`.

A ModelNew file builds its kernels with `torch.utils.cpp_extension.load_inline` (or `load`) when it is imported,
so its compile stage is that import, run in a sandboxed child without a GPU. Every build call is recorded (its
extension name, and the compiler's output when it fails) and the result is written as JSON to the request's
`result_path`. The builds land in TORCH_EXTENSIONS_DIR; torch's versioner calls are recorded too, so the
runner's import reuses them (engine.harness.kernelbench_prebuilt). The C++ half of each build uses kbench's
precompiled header where the request names one, and the first failed compile ends the build
(engine.harness.kernelbench_fast).
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

import torch
import torch.utils.cpp_extension as cpp

from engine.harness.kernelbench_fast import fail_fast, use_pch
from engine.harness.kernelbench_prebuilt import recording_versioner
from engine.harness.kernelbench_types import CompileRequest, CompileResult, ExtensionBuild
from engine.harness.runtimes.base import import_file


def _recording(original: Callable[..., Any], calls: list[ExtensionBuild], kind: str) -> Callable[..., Any]:
    def build(*args: Any, **kwargs: Any) -> Any:
        name = kwargs.get("name", args[0] if args else "?")
        entry = ExtensionBuild(name=str(name), via=kind)
        calls.append(entry)
        try:
            module = original(*args, **kwargs)
        except BaseException as exc:
            entry.error = f"{type(exc).__name__}: {exc}"
            raise
        entry.ok = True
        return module
    return build


def run(request: CompileRequest) -> CompileResult:
    out = CompileResult()
    recording_versioner(cpp.JIT_EXTENSION_VERSIONER, out.versions)
    cpp.load_inline = _recording(cpp.load_inline, out.extensions, "load_inline")
    cpp.load = _recording(cpp.load, out.extensions, "load")
    fail_fast(cpp)       # ninja's first failed compile is the build's error, without waiting for the others
    if request.pch_header:
        use_pch(cpp, request.pch_header, list(request.pch_flags))
    try:
        module = import_file(Path(request.py_path), request.module_name or "kbench_modelnew_compile")
        if not hasattr(module, "ModelNew"):
            out.import_error = "the file defines no class ModelNew"
    except BaseException as exc:  # noqa: BLE001 - whatever the file raises is the verdict's reason
        out.import_error = f"{type(exc).__name__}: {exc}"
        out.traceback = traceback.format_exc(limit=8)[-4000:]
    out.cuda_available = bool(torch.cuda.is_available())
    out.finished = True
    return out


def main(argv: list[str]) -> int:
    request = CompileRequest.from_json(json.loads(Path(argv[0]).read_text()))
    result = run(request)
    Path(request.result_path).write_text(json.dumps(result.to_json(), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
