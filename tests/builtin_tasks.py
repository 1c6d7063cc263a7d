"""The suite's built-in tasks, for tests parametrized over them at collection time (a function, not a fixture)."""

from __future__ import annotations

from collections.abc import Iterator

from engine.tasks.loader import builtin_task_names, load_task


def baselines() -> Iterator[tuple[str, str]]:
    """(task name, direction) for every built-in task direction that has a baseline."""
    for name in builtin_task_names():
        task = load_task(name)
        for d in task.directions:
            if task.baseline_dir(d):
                yield name, d
