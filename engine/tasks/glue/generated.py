"""Kernel-only candidates meet their task: the generated glue of a task direction, and `materialise`.

A kernel-only candidate is a `kernel.cu` (plus any `.cuh`/`.h` it includes) with no `binding.cpp`, defining the
launcher the task direction's signature fixes (engine/tasks/glue/abi.py; the generated texts in
engine/tasks/glue/text.py).

`materialise` turns a kernel-only candidate into an ordinary native one with the generated binding.cpp, where task
and candidate meet (evaluate, `kbench eval`, the proposers): the workspace keeps both files, and a person may edit
the binding later like any other. A signature the ABI cannot express raises GlueError naming the reason; the
kernel-only form is then refused for that direction.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engine.candidates import Candidate, load_candidate
from engine.tasks.glue.abi import GlueError, launcher_abi
from engine.tasks.glue.text import binding_text, header_text
from engine.tasks.glue.triton import BINDING_FILE, binding_py_text, skeleton_text
from engine.tasks.model import Task


def glue_header(task: Task, direction: str) -> str:
    return header_text(launcher_abi(task, direction), task.name)


def glue_binding(task: Task, direction: str) -> str:
    return binding_text(launcher_abi(task, direction))


def glue_triton_skeleton(task: Task, direction: str) -> str:
    """kernel.py's skeleton for a Triton candidate of this task direction (engine/tasks/glue/triton.py)."""
    return skeleton_text(launcher_abi(task, direction), task.name)


def refusal(task: Task, direction: str) -> str | None:
    """Why the kernel-only form is refused for this task direction; None when it is accepted."""
    try:
        launcher_abi(task, direction)
    except GlueError as exc:
        return str(exc)
    return None


def materialise(candidate: Candidate, task: Task, direction: str) -> Candidate:
    """A kernel-only candidate as a native one with the generated binding.cpp (other candidates unchanged).
    GlueError when the task direction's signature cannot be expressed."""
    if candidate.format == "triton":
        return _materialise_triton(candidate, task, direction)
    if candidate.format != "kernel-only":
        return candidate
    try:
        binding = binding_text(launcher_abi(task, direction))
    except GlueError as exc:
        raise GlueError(f"a kernel-only candidate (kernel.cu without binding.cpp) cannot run on task {task.name} "
                        f"({direction}): {exc}. Write binding.cpp beside kernel.cu (a native candidate).") from None
    files = {"kernel.cu": candidate.files["kernel.cu"], "binding.cpp": binding,
             **{rel: text for rel, text in candidate.files.items() if rel != "kernel.cu"}}
    meta = {**candidate.meta, "binding": "generated"}
    return replace(candidate, format="native", files=files, meta=meta)


def _materialise_triton(candidate: Candidate, task: Task, direction: str) -> Candidate:
    """A Triton kernel.py with the binding.py its task's signature generates (one it already has is kept: a person
    may have edited it, as a native binding.cpp)."""
    if BINDING_FILE in candidate.files:
        return candidate
    try:
        binding = binding_py_text(launcher_abi(task, direction))
    except GlueError as exc:
        raise GlueError(f"a Triton candidate (kernel.py) cannot run on task {task.name} ({direction}): {exc}. "
                        "Write binding.py beside kernel.py.") from None
    return replace(candidate, files={**candidate.files, BINDING_FILE: binding},
                   meta={**candidate.meta, "binding": "generated"})


def load_for_task(path: str | Path, task: Task, direction: str, name: str | None = None) -> Candidate:
    """load_candidate, with a kernel-only candidate materialised for this task direction."""
    return materialise(load_candidate(path, name), task, direction)
