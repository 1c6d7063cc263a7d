"""The user's own tasks: the folders named in $KBENCH_TASKS, and the tasks found in them.

`KBENCH_TASKS` is a list of folders separated by `:` (as PATH). Each is a task folder itself, or a folder
holding task folders (native: task.toml + reference.py; robust-kbench: func_*.py + config_*.json) and
KernelBench problem files (*.py). Here, in the task model's layer, because load_task falls back to them for a
name that is not a built-in task; engine/task_catalog.py lists them after the built-in suite.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.config.env import task_dirs
from engine.tasks.native import is_native_task
from engine.tasks.robust_kbench import is_robust_kbench_task


@dataclass(frozen=True)
class CatalogEntry:
    name: str            # the folder's (or .py file's) name: what a person types
    path: Path           # what load_task is given
    builtin: bool

    @property
    def ref(self) -> str:
        """What to hand load_task: the name for a built-in task, the path for one of the user's."""
        return self.name if self.builtin else str(self.path)


def user_task_dirs(env: str | None = None) -> list[Path]:
    """The folders in $KBENCH_TASKS (`env` stands in for its value)."""
    return task_dirs(env)


def _is_task_folder(p: Path) -> bool:
    return p.is_dir() and (is_native_task(p) or is_robust_kbench_task(p))


def _kernelbench_file(p: Path) -> bool:
    if p.suffix != ".py" or not p.is_file() or p.name.startswith(("_", ".")):
        return False
    try:
        head = p.read_text(errors="replace")[:200_000]
    except OSError:
        return False
    return "class Model" in head and "def get_inputs" in head


def user_tasks(env: str | None = None) -> list[CatalogEntry]:
    """The tasks found under $KBENCH_TASKS, in the order the folders are listed, then by name."""
    out: list[CatalogEntry] = []
    seen: set[Path] = set()
    for root in user_task_dirs(env):
        if _is_task_folder(root):
            found = [root]
        elif root.is_dir():
            found = sorted(p for p in root.iterdir() if _is_task_folder(p) or _kernelbench_file(p))
        else:
            found = []
        for p in found:
            rp = p.resolve()
            if rp not in seen:
                seen.add(rp)
                out.append(CatalogEntry(p.stem if p.is_file() else p.name, rp, builtin=False))
    return out


def find_user_task(name: str) -> Path | None:
    """The first task called `name` under $KBENCH_TASKS, or None."""
    return next((e.path for e in user_tasks() if e.name == name), None)
