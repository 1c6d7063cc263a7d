"""Shared test setup: `gpu` tests skip cleanly where no CUDA device is present, and the fixtures tests of more
than one folder use, with the plain helpers they share (`cli`, `cand`: imported, `from tests.conftest import
cli`). The tests sit in folders that mirror engine/ (tests/pipeline/ for engine/pipeline/, ...; repository-wide
checks in tests/project/); tests/ and each folder are packages, so a helper is imported by its dotted path
(`from tests.kbench_procs import ...`) from any folder, and tests/paths.py says where REPO and the fixtures are.
A folder's own fixtures are in its conftest.py."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from engine.candidates import Candidate
from engine.config.env import env_raw
from tests.paths import REPO

os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")
# `kbench eval` leaves a judge up for the next command (engine/pipeline/kept_judge.py); in the suite only the tests
# of that feature ask for one (tests/acceptance/test_kept_judge.py), so no test's judge is claimed by another's
os.environ.setdefault("KBENCH_KEEP_JUDGE_S", "0")

# A test run started in the background (a non-interactive shell's `cmd &`, a CI runner) inherits SIGINT ignored, and
# every kbench the tests start would inherit that too and never see a test's Ctrl-C. Python's own handler here
# (SIGINT raises KeyboardInterrupt, as in a terminal) is reset to the default in a child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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
    if report.outcome == "failed" and report.capstdout:   # the EXPLOIT-ROW lines and the like
        body += "\n-- captured stdout --\n" + report.capstdout[-4000:]
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


# gpu tests of all xdist workers hold GPU_LOCK shared; a test that loads the GPU on purpose (`gpu_to_itself`)
# holds it exclusively, so its load never reaches another test's timing. GPU_GATE gives that test precedence:
# flock has none, and with three workers a shared lock is nearly always held by one of them.
GPU_LOCK = Path(tempfile.gettempdir()) / "kbench-gpu-tests.lock"
GPU_GATE = Path(tempfile.gettempdir()) / "kbench-gpu-tests.gate"


@contextlib.contextmanager
def _flocked(path: Path, mode: int):
    with open(path, "a") as fh:
        fcntl.flock(fh, mode)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _gpu_shared_with_other_tests(request):
    if "gpu" not in request.keywords or not HAS_GPU or "gpu_to_itself" in request.fixturenames:
        yield
        return
    with _flocked(GPU_GATE, fcntl.LOCK_SH):
        pass   # waits while a test that wants the GPU to itself is queued or running
    with _flocked(GPU_LOCK, fcntl.LOCK_SH):
        yield


@pytest.fixture
def gpu_to_itself():
    """The GPU with no other test of this session on it (other processes of the machine may still be). Name it
    among the test's parameters: through request.getfixturevalue the shared lock is already held, and the test
    waits on itself."""
    with _flocked(GPU_GATE, fcntl.LOCK_EX), _flocked(GPU_LOCK, fcntl.LOCK_EX):
        yield


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
def prebuilt_pch(tmp_path_factory) -> Path | None:
    """Torch's precompiled header built once for the run (tests/prebuilt_pch.py): under xdist in the run's
    shared temp folder, so one worker builds it and the others wait for it."""
    from tests import prebuilt_pch as pch

    if not HAS_NVCC:
        return pch.none_here()      # kbench builds no header here either: the tests seed nothing
    base = tmp_path_factory.getbasetemp()
    return pch.build((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "prebuilt-pch")


@pytest.fixture
def seeded_cache(tmp_path, prebuilt_pch) -> Path:
    """`tmp_path/cache`: a kbench cache of the test's own (for KBENCH_CACHE) that already holds the run's
    precompiled header, as on a machine where kbench has built once."""
    from tests.prebuilt_pch import seed_pch

    return seed_pch(tmp_path / "cache")


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
    started, a task of its own) defines its own `ws`, or asks for `ln_ws` (the usual layernorm session)."""
    from engine.workspace import Workspace

    w = Workspace.create(tmp_path / "ws")
    yield w
    w.close()


@pytest.fixture
def ln_ws(tmp_path, layernorm_task):
    """A new workspace at `tmp_path/ws` with session "ln" started (layernorm forward, the tuner proposing),
    closed after the test."""
    from engine.workspace import Workspace

    w = Workspace.create(tmp_path / "ws")
    w.start_session("ln", layernorm_task, "forward", proposer="tuner")
    yield w
    w.close()


@pytest.fixture(scope="session")
def toolchain():
    """This machine's nvcc and g++ with the arch list pinned to 9.0 (so a test does not depend on the machine's
    GPU), for the real-compile tests of tests/harness/ and tests/tasks/test_glue.py; one key for all of them, so
    with `native_cache_root` the precompiled header is built once per session. Skips where there is no nvcc."""
    from engine.harness.toolchain import detect

    if not HAS_NVCC:
        pytest.skip("needs nvcc (set CUDA_HOME)")
    return detect(archs="9.0")


@pytest.fixture(scope="module")
def layernorm():
    """The built-in layernorm_lastdim task, loaded by name (read-only: `layernorm_task` is a copy a test may
    change). The LLM and proposer tests use tests/fixtures/llm/llm_testkit.py's fixture of the same name."""
    from engine.tasks.loader import load_task

    return load_task("layernorm_lastdim")


@pytest.fixture
def judged(monkeypatch, tmp_path):
    """evaluate() with the build and the judge replaced (tests/pipeline/timing_fakes.py) and a build cache of the
    test's own: the list that collects each judge request evaluate() makes. tests/pipeline/test_remeasure.py has
    a `judged` of its own (a scripted judge)."""
    from tests.pipeline.timing_fakes import fake_judge

    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path / "cache"))
    return fake_judge(monkeypatch, tmp_path)


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    """`kbench ARGV` in this process (engine.cli.main): its exit code, stdout and stderr. Imported by the tests
    that use it (`from tests.conftest import cli`)."""
    from engine.cli import main

    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def cand(tag: str, **meta) -> Candidate:
    """A small native candidate named "try TAG" (its kernel.cu names the tag, so each tag has its own source
    hash), with `meta`. Imported by the tests that use it (`from tests.conftest import cand`)."""
    return Candidate("native", {"kernel.cu": f"// kernel {tag}\n__global__ void k() {{}}\n",
                                "binding.cpp": "// glue\n"}, f"try {tag}", meta)
