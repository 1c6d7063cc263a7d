"""Warming the generated glue: compile a task direction's generated binding.cpp (engine/tasks/glue/generated.py) into
the object cache before any kernel-only candidate asks for it, so that the first one costs an nvcc run and a link too.

`prebuild_glue` does it now (scripts/bench_compile.py, tests); `warm_glue_in_background` starts it on a daemon
thread where a session starts work on a task (engine/evolve/factory.py). The background warm-up never builds the
precompiled header (most of a minute of CPU the first time): without one it does nothing, and the first candidate
builds both as it would have. Nothing it does can fail a session: a signature without generated glue, a missing
compiler or a failed compile is only a status.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from engine.harness.build.native import prebuild_binding
from engine.harness.toolchain import Toolchain, detect
from engine.tasks.glue.abi import GlueError
from engine.tasks.glue.generated import glue_binding
from engine.tasks.model import Task


@dataclass(frozen=True)
class GlueWarm:
    status: str          # cached | compiled | refused | no-pch | failed
    detail: str
    seconds: float


def prebuild_glue(task: Task, direction: str, cache_root: Path, toolchain: Toolchain | None = None,
                  build_pch: bool = True, timeout_s: float = 300.0) -> GlueWarm:
    """Compile the generated binding.o of `task`'s `direction` into the object cache unless it is there."""
    t0 = time.monotonic()
    try:
        binding = glue_binding(task, direction)
    except GlueError as exc:
        return GlueWarm("refused", str(exc), time.monotonic() - t0)
    try:
        if toolchain is None:
                toolchain = detect()
        status, detail = prebuild_binding(binding, Path(cache_root), toolchain, timeout_s=timeout_s,
                                          build_pch=build_pch)
    except Exception as exc:  # noqa: BLE001 - no toolchain here, a broken cache: a status, never a failure
        status, detail = "failed", f"{type(exc).__name__}: {exc}"
    return GlueWarm(status, detail, time.monotonic() - t0)


def warm_glue_in_background(task: Task, direction: str, cache_root: Path) -> threading.Thread | None:
    """Start prebuild_glue (without building the precompiled header) on a daemon thread; None when the task
    direction has no generated glue."""
    try:
        glue_binding(task, direction)
    except (GlueError, KeyError):
        return None
    thread = threading.Thread(target=prebuild_glue, args=(task, direction, Path(cache_root)),
                              kwargs={"build_pch": False}, daemon=True, name=f"kbench-glue-{task.name}-{direction}")
    thread.start()
    return thread
