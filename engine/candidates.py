"""A candidate kernel: its files, its format, and a content hash that keys builds and caches."""

from __future__ import annotations

import ast
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine import userfiles
from engine.errors import CandidateError
from engine.jsonable import dump, load

# kernel-only: kernel.cu (and its headers) without binding.cpp, defining the task's launcher
# (engine/tasks/glue/generated.py); it becomes a native candidate with the generated binding.cpp where it meets its task
# (glue.materialise). triton: kernel.py defining the launcher in Triton's form (engine/tasks/glue/triton.py), plus the
# binding.py kbench generates for it where it meets its task (glue.materialise); kernel.py alone is the form a person or
# an LLM writes.
CandidateFormat = Literal["native", "robust-kbench", "kernelbench", "kernel-only", "triton"]
NATIVE_FILES = ("kernel.cu", "binding.cpp")
HEADER_SUFFIXES = (".cuh", ".h")
_PYBIND = re.compile(r"\bPYBIND11_MODULE\s*\(")
_MODELNEW = re.compile(r"^class\s+ModelNew\b", re.MULTILINE)
_LAUNCHER = re.compile(r"\bkb_(?:forward|backward)\s*\(")     # what a kernel-only kernel.cu defines
TRITON_FILES = ("kernel.py", "binding.py")


@dataclass(frozen=True)
class Candidate:
    format: CandidateFormat
    files: dict[str, str]  # relative path -> text
    name: str = "candidate"
    meta: dict[str, Any] = field(default_factory=dict)  # provenance: proposer, operator, parents, rationale

    @property
    def source_hash(self) -> str:
        h = hashlib.sha256(self.format.encode())
        for rel in sorted(self.files):
            h.update(b"\0" + rel.encode() + b"\0" + self.files[rel].encode())
        return h.hexdigest()[:16]

    @property
    def main_file(self) -> str:
        if self.format in ("native", "kernel-only"):
            return "kernel.cu"
        if self.format == "triton":
            return "kernel.py"
        return next(iter(self.files))

    def write_to(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        for rel, text in self.files.items():
            target = directory / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        return directory

    def to_json(self) -> dict[str, Any]:
        return dump(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "Candidate":
        if isinstance(obj, dict) and obj.get("meta") is None:   # an older writer's "meta": null reads as no meta
            obj = {**obj, "meta": {}}
        return load(cls, obj, "a candidate")


def detect_format(files: dict[str, str]) -> CandidateFormat:
    names = set(files)
    if set(NATIVE_FILES) <= names:
        return "native"
    if _is_kernel_only(files):
        return "kernel-only"
    if _is_triton(files):
        return "triton"
    if len(files) == 1:
        (rel, text), = files.items()
        if rel.endswith(".cu") and _PYBIND.search(text):
            return "robust-kbench"
        if rel.endswith(".py") and _MODELNEW.search(text):
            return "kernelbench"
    raise CandidateError(
        f"cannot tell the candidate format of {sorted(names)}: expected kernel.cu + binding.cpp (native), kernel.cu "
        "alone defining the task's launcher kb_forward / kb_backward (kernel-only: `kbench glue TASK` prints it), "
        "one .cu file with PYBIND11_MODULE (robust-kbench), one .py defining class ModelNew (KernelBench), or kernel.py "
        "defining the launcher kb_forward / kb_backward in Triton (`kbench glue TASK --lang triton` prints it).")


def load_candidate(path: str | Path, name: str | None = None) -> Candidate:
    """Read a candidate from a native folder (or its kernel.cu), a robust-kbench .cu or a ModelNew .py.

    A `.cu` with `PYBIND11_MODULE` is a robust-kbench candidate whatever its name, `kernel.cu` included (as
    robust-kbench publishes its kernels), unless a `binding.cpp` beside it makes the folder a native candidate.
    A folder with no binding.cpp but exactly one such `.cu` is that robust-kbench candidate. A `kernel.cu` without
    PYBIND11_MODULE, defining kb_forward or kb_backward, and without a binding.cpp beside it (given as the file or
    its folder) is a kernel-only candidate: kernel.cu and the .cuh/.h files beside it; engine/tasks/glue/generated.py
    generates its binding.cpp.

    Files are read by engine.userfiles: a link, a FIFO, a device or an oversized file among them is a
    CandidateError naming it. The path given may itself be a link (the user named it); nothing in a folder is
    read through one."""
    p = Path(path)
    if not p.exists():
        raise CandidateError(f"{p}: no such file or folder.")
    if not p.is_dir() and p.name == "kernel.cu" and not _present(p.parent / "binding.cpp"):
        kernel_only = _kernel_only_folder(p.parent)
        if kernel_only is not None:
            return Candidate("kernel-only", kernel_only, name or p.parent.name)
    triton = _triton_folder(p if p.is_dir() else p.parent) if p.is_dir() or p.name in TRITON_FILES else None
    if triton is not None:
        return Candidate("triton", triton, name or (p if p.is_dir() else p.parent).name)
    if p.is_dir() or (p.name in NATIVE_FILES and _present(p.parent / "binding.cpp")):
        folder = p if p.is_dir() else p.parent
        missing = [f for f in NATIVE_FILES if not _present(folder / f)]
        if missing:
            single = _single_file_candidate(folder) if "binding.cpp" in missing else None
            if single is not None:
                return load_candidate(single, name or folder.name)
            kernel_only = _kernel_only_folder(folder) if missing == ["binding.cpp"] else None
            if kernel_only is not None:
                return Candidate("kernel-only", kernel_only, name or folder.name)
            raise CandidateError(f"{folder}: a native candidate needs {' and '.join(NATIVE_FILES)}; "
                                 f"missing {', '.join(missing)} (a robust-kbench candidate is one .cu file with "
                                 "PYBIND11_MODULE; a kernel-only candidate is a kernel.cu defining the task's "
                                 "launcher kb_forward / kb_backward, see `kbench glue TASK`).")
        files = {f: _read(folder / f) for f in NATIVE_FILES}
        files.update(_headers(folder))
        return Candidate("native", files, name or folder.name)
    files = {p.name: userfiles.read_text(p, error=CandidateError, follow_links=True)}   # the file the user named
    return Candidate(detect_format(files), files, name or p.stem)


def _present(path: Path) -> bool:
    """There is something of that name (a link or a FIFO too: reading it then names it, instead of the candidate
    being taken for another format without it)."""
    return os.path.lexists(path)


def _read(path: Path) -> str:
    return userfiles.read_text(path, error=CandidateError)


def _headers(folder: Path) -> dict[str, str]:
    return {extra.name: _read(extra)
            for extra in sorted(folder.glob("*.cuh")) + sorted(folder.glob("*.h"))}


def _is_kernel_only(files: dict[str, str]) -> bool:
    """kernel.cu naming a launcher (kb_forward / kb_backward) without PYBIND11_MODULE, no binding.cpp, and nothing
    else but headers."""
    kernel = files.get("kernel.cu")
    return (kernel is not None and "binding.cpp" not in files and not _PYBIND.search(kernel)
            and bool(_LAUNCHER.search(kernel)) and all(rel == "kernel.cu" or rel.endswith(HEADER_SUFFIXES)
                                                      for rel in files))


def _kernel_only_folder(folder: Path) -> dict[str, str] | None:
    """The files of a kernel-only candidate in `folder` (kernel.cu + headers), or None when it is not one."""
    kernel = folder / "kernel.cu"
    if not _present(kernel):
        return None
    files = {"kernel.cu": _read(kernel), **_headers(folder)}
    return files if _is_kernel_only(files) else None


def _is_triton(files: dict[str, str]) -> bool:
    """kernel.py defining kb_forward / kb_backward at module level (and binding.py beside it, or nothing else)."""
    kernel = files.get("kernel.py")
    return kernel is not None and set(files) <= set(TRITON_FILES) and defines_launcher(kernel)


def defines_launcher(text: str, launcher: str | None = None) -> bool:
    """A Python source defines kb_forward / kb_backward (or `launcher`) at module level, read from its syntax tree
    (a comment or a string naming it does not count). A file that does not parse is taken at its word, a line
    `def kb_forward(`, so that its syntax error is reported as the candidate's rather than as an unknown format."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return bool(re.search(rf"^def\s+({launcher or 'kb_forward|kb_backward'})\b", text, re.MULTILINE))
    names = {launcher} if launcher else {"kb_forward", "kb_backward"}
    for n in tree.body:
        if isinstance(n, ast.FunctionDef) and n.name in names:
            return True
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in n.targets):
            return True
    return False


def _triton_folder(folder: Path) -> dict[str, str] | None:
    """The files of a Triton candidate in `folder` (kernel.py and binding.py where present), or None when it is
    not one (no kernel.py, or one that defines no launcher: a KernelBench ModelNew named kernel.py, say)."""
    if not _present(folder / "kernel.py") or any(_present(folder / f) for f in NATIVE_FILES):
        return None
    files = {f: _read(folder / f) for f in TRITON_FILES if _present(folder / f)}
    return files if _is_triton(files) else None


def _single_file_candidate(folder: Path) -> Path | None:
    """The one `.cu` with PYBIND11_MODULE in `folder`, if there is exactly one."""
    found = [cu for cu in sorted(folder.glob("*.cu")) if _PYBIND.search(_read(cu))]
    return found[0] if len(found) == 1 else None
