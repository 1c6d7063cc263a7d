"""The KernelBench compile child's request and result, typed (engine/harness/build/stage.py `_build_kernelbench` sends
the one and reads the other; engine/harness/kernelbench/compile.py the reverse).

The child imports the candidate's Python, jailed where pydantic is out of reach: it reads and writes with plain
dataclasses and json. What it wrote may be the candidate's forgery, so the parent reads it strictly
(engine.jsonable): `CompileResult.from_json` raises DataError, which the build turns into a failure.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from engine import jsonable
from engine.errors import DataError

MAX_EXTENSIONS = 256         # load_inline calls in one import; more is a forgery (or a file not worth building)
MAX_TEXT_CHARS = 20000       # an error or traceback kept for the log
MAX_SOURCE_CHARS = 2_000_000  # one recorded source file (record_sources); more is not a kernel worth exporting


@dataclass(frozen=True)
class CompileRequest:
    """The request file (run_child adds `result_path`)."""
    py_path: str
    module_name: str
    result_path: str = ""
    # Record the sources torch's load_inline writes and the flags it passes on, and build nothing (the import gets
    # an empty module for each call): what `kbench export` packages (engine/export/kernelbench.py).
    record_sources: bool = False
    pch_header: str = ""              # kbench's precompiled header for load_inline's C++ half ("" : none)
    pch_flags: tuple[str, ...] = ()   # the g++ flags its .gch was built with (engine/harness/kernelbench/fast.py)
    # A Triton candidate: py_path is its folder (kernel.py + binding.py, engine/harness/triton_load.py), and the import
    # checks that the binding exports `entry` and kernel.py defines `launcher`; nothing is built before a GPU runs it.
    triton_entry: str = ""
    triton_launcher: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "CompileRequest":
        return jsonable.load_trusted(cls, obj)   # read in the jail, without pydantic; kbench wrote it


@dataclass
class ExtensionBuild:
    """One build call the import made (torch.utils.cpp_extension.load_inline or load)."""
    name: str
    via: str                     # "load_inline" or "load"
    ok: bool = False
    error: str | None = None     # the compiler's message, when it failed
    # record_sources: the files torch wrote for the build (main.cpp, cuda.cu: name -> text), and the arguments it
    # passed to its compile step (extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths, with_cuda)
    sources: dict[str, str] = field(default_factory=dict)
    flags: dict[str, Any] = field(default_factory=dict)


@dataclass
class CompileResult:
    """The result file. `finished` is set last: without it the child died on the way."""
    finished: bool = False
    extensions: list[ExtensionBuild] = field(default_factory=list)
    versions: list[dict[str, Any]] = field(default_factory=list)   # torch's versioner calls (kernelbench_prebuilt)
    import_error: str | None = None
    traceback: str | None = None
    cuda_available: bool = False
    kernels: list[str] = field(default_factory=list)   # a Triton candidate's @triton.jit kernels, by name

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)   # not jsonable.dump: the child writes it, jailed without pydantic

    @classmethod
    def from_json(cls, obj: Any, what: str = "the KernelBench compile child's result") -> "CompileResult":
        res = jsonable.load(cls, obj, what)
        if len(res.extensions) > MAX_EXTENSIONS or len(res.versions) > MAX_EXTENSIONS:
            raise DataError(f"{what}: more than {MAX_EXTENSIONS} extension builds")
        for ext in res.extensions:
            ext.error = ext.error[:MAX_TEXT_CHARS] if ext.error is not None else None
            if any(len(t) > MAX_SOURCE_CHARS for t in ext.sources.values()) or len(ext.sources) > 8:
                raise DataError(f"{what}: extension {ext.name!r} records more source than a kernel has")
        if len(res.kernels) > MAX_EXTENSIONS:
            raise DataError(f"{what}: more than {MAX_EXTENSIONS} Triton kernels")
        res.kernels = [k[:200] for k in res.kernels]
        res.import_error = res.import_error[:MAX_TEXT_CHARS] if res.import_error is not None else None
        return res
