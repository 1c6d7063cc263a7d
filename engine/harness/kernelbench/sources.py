"""The sources a KernelBench `ModelNew` file compiles with load_inline, as torch writes them, without compiling.

`kbench export` packages a ModelNew: its load_inline calls become extensions the package's setup.py builds. What
those calls compile is whatever the file computes at import (strings, f-strings, files it reads), so the file is
imported, jailed like the compile stage's import (engine/harness/build/stage.py `_build_kernelbench`), with torch's
compile step replaced by a recorder (engine/harness/kernelbench/compile.py, `record_sources`): torch's own
load_inline writes main.cpp (its implicit include, the candidate's C++ and the pybind module it generates for
`functions`) and cuda.cu (its implicit headers and the candidate's CUDA), and the recorder keeps those files and
the flags torch passed on. Nothing is built, so this takes seconds, with no GPU and no compiler.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.candidates import Candidate
from engine.errors import DataError, KbenchError
from engine.harness.build.steps import compile_jail
from engine.harness.kernelbench.child_types import CompileRequest, CompileResult
from engine.jail.limits import IMPORT
from engine.procs import run_child

TIMEOUT_S = 120.0


class SourcesError(KbenchError):
    """The file's load_inline sources cannot be recorded (it raised on import, it calls `load` on files...)."""


@dataclass(frozen=True)
class InlineExtension:
    """One load_inline call of the file: its name, the files torch wrote for it, the flags it passed on."""
    name: str
    sources: dict[str, str]                         # "main.cpp" / "cuda.cu" -> text, as torch wrote them
    flags: dict[str, Any] = field(default_factory=dict)

    def flag_list(self, key: str) -> list[str]:
        value = self.flags.get(key) or []
        return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def record_sources(candidate: Candidate, timeout_s: float = TIMEOUT_S) -> list[InlineExtension]:
    """Import `candidate` (a KernelBench ModelNew .py) jailed, with torch's compile step recorded instead of run;
    its load_inline calls in call order. SourcesError when the import fails or a call is not load_inline."""
    main = candidate.main_file
    with tempfile.TemporaryDirectory(prefix="kbench-sources-") as tmp:
        box = Path(tmp)
        os.chmod(box, 0o711)
        (box / "src").mkdir(mode=0o755)
        (box / "src" / main).write_text(candidate.files[main])
        os.chmod(box / "src" / main, 0o644)
        built = box / "ext"
        built.mkdir(mode=0o700)
        request = CompileRequest(py_path=str(box / "src" / main), module_name=f"kb_sources_{candidate.source_hash}",
                                 record_sources=True)
        env = {"TORCH_EXTENSIONS_DIR": str(built), "CUDA_VISIBLE_DEVICES": "", "HOME": str(built),
               "TMPDIR": str(built)}
        outcome = run_child("engine.harness.kernelbench.compile", request.to_json(), timeout_s=timeout_s,
                            extra_env=env, jail=compile_jail(built, [box / "src"], None, IMPORT))
        shutil.rmtree(built, ignore_errors=True)
    try:   # the child ran the candidate's code, which may have overwritten its result: read it strictly
        res = CompileResult.from_json(outcome.result or {})
    except DataError as exc:
        raise SourcesError(f"{main}: its import left a result kbench cannot read ({exc}).") from None
    if outcome.timed_out:
        raise SourcesError(f"{main}: its import did not finish within {timeout_s:.0f} s.")
    if not res.finished:
        raise SourcesError(f"{main}: its import did not finish: {outcome.describe_crash()}")
    if res.import_error:
        raise SourcesError(f"{main} raised on import, so its load_inline sources cannot be read: {res.import_error}")
    out = []
    for call in res.extensions:
        if call.via != "load_inline":
            raise SourcesError(f"{main} builds {call.name!r} with torch.utils.cpp_extension.{call.via} from files of "
                               "its own; only load_inline sources, which the file holds, can be packaged.")
        if not call.ok or "main.cpp" not in call.sources:
            raise SourcesError(f"{main}: its load_inline call {call.name!r} wrote no sources"
                               + (f" ({call.error})" if call.error else "") + ".")
        out.append(InlineExtension(call.name, dict(call.sources), dict(call.flags)))
    names = [e.name for e in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SourcesError(f"{main} calls load_inline twice with one name ({', '.join(twice)}); torch would build the "
                           "first only.")
    return out
