"""Helpers for tests that run kbench in child processes (CPU, the fake evaluator of tests/doubles/kbench.py, a
jailed runner without a GPU)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.paths import REPO

ENV = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "KBENCH_"))}
ENV["PYTHONPATH"] = str(REPO) + os.pathsep + ENV.get("PYTHONPATH", "")


def evolve_args(ws: Path, session: str, *, generations: int = 3, population: int = 3, seed: int = 5,
                extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "tests.doubles.kbench", "--workspace", str(ws), "evolve", "gelu_bias", "--proposer",
            "tuner", "--generations", str(generations), "--population", str(population),
            "--session", session, "--seed", str(seed), *extra]


def kbench(ws: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120,
           fake_evaluator: bool = False) -> subprocess.CompletedProcess:
    """`kbench --workspace WS ARGS` in a child process; `fake_evaluator`: on the fake evaluator
    (tests/doubles/kbench.py)."""
    module = "tests.doubles.kbench" if fake_evaluator else "engine.cli"
    return subprocess.run([sys.executable, "-m", module, "--workspace", str(ws), *args], capture_output=True,
                          text=True, env={**ENV, **(env or {})}, cwd=REPO, timeout=timeout)


def run(args: list[str], env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, env={**ENV, **(env or {})}, cwd=REPO, timeout=timeout)


def start(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**ENV, **(env or {})}, cwd=REPO)


def wait_until(cond, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def log_json(ws: Path, session: str) -> list[dict]:
    out = kbench(ws, "log", session, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["candidates"]


def shape(ws: Path, session: str) -> list[tuple]:
    """What a session proposed, independent of its name: (generation, n, source hash, parents as g-n)."""
    from engine.workspace import Workspace
    with Workspace.open(ws) as w:
        views = w.candidates(session)
        strip = lambda cid: cid[len(session) + 1:]
        return [(v.record.generation, v.record.n, v.record.source_hash, tuple(strip(p) for p in v.record.parents))
                for v in views]


def evaluated_counts(ws: Path, session: str) -> dict[str, int]:
    from engine.workspace import Workspace
    with Workspace.open(ws) as w:
        return {v.id: sum(1 for e in v.status.events if e.event == "evaluated") for v in w.candidates(session)}


def git_fsck_clean(ws: Path) -> None:
    proc = subprocess.run(["git", "fsck", "--full", "--strict", "--no-dangling"], cwd=ws, capture_output=True,
                          text=True, env=ENV)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "error" not in proc.stderr.lower() and "missing" not in proc.stdout.lower(), proc.stdout + proc.stderr


def kbench_fsck_clean(ws: Path) -> None:
    out = kbench(ws, "fsck")
    assert out.returncode == 0 and out.stdout.rstrip().endswith(("clean", "repaired)")), out.stdout + out.stderr


@contextlib.contextmanager
def runner_without_gpu(tmp_path: Path) -> Iterator[tuple[Any, float]]:
    """A real jailed runner on a machine without a GPU (its timer a stand-in that never loads), up to its `no_gpu`
    answer: (its RunnerLink, a deadline for the steps that follow). It still imports a candidate, so a test sees
    what the candidate's import does in the jail. Closed afterwards."""
    from engine.pipeline.judge.runner_link import RunnerLink
    from engine.gpu_wait import NO_GPU
    from engine.pipeline.protocol.types import TimerSpec

    timer = tmp_path / "timer.so"
    timer.write_bytes(b"not a library")
    link = RunnerLink(TimerSpec(str(timer), "kb_timer"))
    try:
        link.start()
        deadline = time.monotonic() + 120
        assert link.up(deadline) == NO_GPU
        yield link, deadline
    finally:
        link.close()
