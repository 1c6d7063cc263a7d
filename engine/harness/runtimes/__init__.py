"""Per-format adapters that run a task's reference and a candidate on one config (inside the sandbox)."""

from __future__ import annotations

from engine.harness.runtimes.base import TaskRuntime
from engine.harness.runtimes.kernelbench import KernelBenchRuntime
from engine.harness.runtimes.native import NativeRuntime
from engine.harness.runtimes.robust_kbench import RobustKbenchRuntime
from engine.tasks.model import Task


def runtime_for(task: Task, direction: str) -> TaskRuntime:
    if task.format == "native":
        return NativeRuntime(task, direction)
    if task.format == "robust-kbench":
        return RobustKbenchRuntime(task, direction)
    if task.format == "kernelbench":
        return KernelBenchRuntime(task, direction)
    raise ValueError(f"unknown task format {task.format!r}")
