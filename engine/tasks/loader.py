"""Find and load a task by name or path, whatever its format."""

from __future__ import annotations

import difflib
from pathlib import Path

from engine.errors import TaskError
from engine.tasks import kernelbench, native, robust_kbench, user_tasks
from engine.tasks.model import Task


def builtin_tasks_dir() -> Path:
    """The built-in suite: the `tasks/` folder beside the engine package. (The user's own task folders are
    listed in $KBENCH_TASKS: engine/tasks/user_tasks.py.)"""
    return Path(__file__).resolve().parents[2] / "tasks"


def builtin_task_names() -> list[str]:
    root = builtin_tasks_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "task.toml").is_file())


def load_task(ref: str | Path) -> Task:
    """Load `ref`: a built-in task name, a task folder (native or robust-kbench) or a KernelBench .py
    (`problem.py@fp16` / `@bf16` evaluates it in that precision, as KernelBench's `precision` option does)."""
    path = Path(ref)
    if not path.exists() and isinstance(ref, str):
        file, dtype = kernelbench.split_ref(ref)
        if dtype != "float32" and Path(file).is_file():
            return kernelbench.load_kernelbench(Path(file), dtype)
    if not path.exists() and isinstance(ref, str) and "/" not in ref:
        candidate = builtin_tasks_dir() / ref
        if candidate.exists():
            path = candidate
        elif (mine := user_tasks.find_user_task(ref)) is not None:
            path = mine                        # a task folder under $KBENCH_TASKS
        else:
            names = builtin_task_names()
            mine = [e.name for e in user_tasks.user_tasks()]
            close = difflib.get_close_matches(ref, names + mine, n=2, cutoff=0.6)
            hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
            raise TaskError(f"no task named {ref!r}{hint}: not a path, not a built-in task (built-in: "
                            f"{', '.join(names) or 'none found'}) and not in a folder of $KBENCH_TASKS.")
    if path.is_dir():
        if native.is_native_task(path):
            return native.load_native(path)
        if robust_kbench.is_robust_kbench_task(path):
            return robust_kbench.load_robust_kbench(path)
        raise TaskError(f"{path}: not a task folder. A native task has task.toml and reference.py; "
                        "a robust-kbench task has func_forward.py or func_backward.py with config_*.json.")
    if path.is_file() and path.suffix == ".py":
        return kernelbench.load_kernelbench(path)
    raise TaskError(f"{path}: not found, or not a task folder or KernelBench .py file.")
