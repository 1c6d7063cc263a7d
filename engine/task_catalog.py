"""The tasks a person can pick by name: the built-in suite, then the folders named in $KBENCH_TASKS.

Their tasks are listed after the built-in ones (`kbench tasks`, the app's home screen and new-session form)
and load by name anywhere a TASK is taken; a built-in task of the same name wins, and the path always works.
What $KBENCH_TASKS holds and how its tasks are found: engine/tasks/user_tasks.py (in the task model's layer,
where load_task falls back to it).
"""

from __future__ import annotations

from engine.tasks.loader import builtin_task_names, builtin_tasks_dir
from engine.tasks.user_tasks import CatalogEntry, user_tasks

__all__ = ["catalog"]


def catalog() -> list[CatalogEntry]:
    root = builtin_tasks_dir()
    return [CatalogEntry(n, root / n, True) for n in builtin_task_names()] + user_tasks()
