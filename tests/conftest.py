"""Shared test setup: `gpu` tests skip cleanly where no CUDA device is present, and the fixtures tests of more
than one folder use. The tests sit in folders that mirror engine/ (tests/pipeline/ for engine/pipeline/, ...;
repository-wide checks in tests/project/); tests/ and each folder are packages, so a helper is imported by its
dotted path (`from tests.kbench_procs import ...`) from any folder, and tests/paths.py says where REPO and the
fixtures are. A folder's own fixtures are in its conftest.py."""

from __future__ import annotations

import os
import shutil

import pytest

from engine.config_env import env_raw
from tests.paths import REPO

os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")


def _has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


HAS_GPU = _has_gpu()
HAS_NVCC = shutil.which("nvcc") is not None or os.path.exists(os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc"))


def pytest_runtest_logreport(report):
    """KBENCH_TEST_LOG=FILE: append each test's outcome as it ends (a failure with its report), so a GPU run
    that a device's time limit cuts before pytest's summary still says which tests ran and why they failed.
    Under xdist the controller writes it (the workers' reports reach it); a worker writes nothing itself."""
    path = env_raw("KBENCH_TEST_LOG")
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if report.when != "call" and report.outcome == "passed":
        return
    worker = getattr(getattr(report, "node", None), "gateway", None)
    head = f"== {report.outcome.upper()} {report.when} {report.duration:.1f}s {getattr(worker, 'id', '-')} {report.nodeid}"
    body = "" if report.outcome != "failed" else (report.longreprtext or "")[-6000:]
    with open(path, "a") as f:
        f.write(head + "\n" + (body + "\n" if body else ""))


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none visible)")
    skip_nvcc = pytest.mark.skip(reason="needs nvcc (set CUDA_HOME)")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip_gpu)
        if "slow" in item.keywords and not HAS_NVCC:
            item.add_marker(skip_nvcc)


@pytest.fixture
def layernorm_task(tmp_path):
    """The built-in layernorm task copied into `tmp_path/task-layernorm` and loaded from there: a task folder
    of the user's own, outside the repository, that a test may change without touching the built-in one."""
    from engine.tasks.loader import load_task

    folder = tmp_path / "task-layernorm"
    folder.mkdir()
    for name in ("task.toml", "reference.py"):
        shutil.copy(REPO / "tasks" / "layernorm_lastdim" / name, folder / name)
    return load_task(folder)


@pytest.fixture(scope="session")
def native_cache_root(tmp_path_factory):
    """One build cache for the real-compile tests of tests/harness/test_build.py and
    tests/harness/test_object_cache.py, so the precompiled torch header (40 s on 2 cores) is built once per
    session. Each module builds sources of its own (test_object_cache's differ from the fixture in launch.h), so
    neither finds the other's builds or objects."""
    return tmp_path_factory.mktemp("kbench-cache")


@pytest.fixture
def ws(tmp_path):
    """A new, empty workspace at `tmp_path/ws`, closed after the test. A module that needs more (a session
    started, a task of its own) defines its own `ws` (`ln_ws` starts the usual layernorm one)."""
    from engine.workspace import Workspace

    w = Workspace.create(tmp_path / "ws")
    yield w
    w.close()


@pytest.fixture
def ln_ws(tmp_path, layernorm_task):
    """A new workspace at `tmp_path/ws` with session "ln" started (layernorm forward, the tuner proposing);
    modules whose tests all want it define `ws` as it."""
    from engine.workspace import Workspace

    w = Workspace.create(tmp_path / "ws")
    w.start_session("ln", layernorm_task, "forward", proposer="tuner")
    yield w
    w.close()
