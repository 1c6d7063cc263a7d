"""KBENCH_TEST_LOG: every test's outcome is appended to a file as the test ends, so a GPU run cut by the
device's time limit (before pytest prints its summary) still says which tests ran and why one failed."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.paths import REPO

SAMPLE = '''
import pytest

def test_passes():
    assert 1 + 1 == 2

def test_fails():
    assert "resnet" == "layernorm", "the verdict named the wrong task"

@pytest.mark.skip(reason="no GPU here")
def test_skipped():
    pass
'''


def _pytest(tmp_path, source: str, log: str | None) -> subprocess.CompletedProcess:
    """pytest in a child on one sample file, with this project's conftest and KBENCH_TEST_LOG=`log` (or unset)."""
    (tmp_path / "test_sample.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if k not in ("KBENCH_TEST_LOG", "PYTEST_XDIST_WORKER")}
    env["PYTHONPATH"] = str(REPO)
    if log is not None:
        env["KBENCH_TEST_LOG"] = log
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_sample.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_each_outcome_is_appended_as_the_test_ends(tmp_path):
    log = tmp_path / "reports.txt"
    proc = _pytest(tmp_path, SAMPLE, str(log))
    assert proc.returncode == 1, proc.stdout + proc.stderr   # one test fails, as written
    lines = log.read_text().splitlines()
    heads = [ln for ln in lines if ln.startswith("== ")]
    assert [h.split()[1:3] for h in heads] == [["PASSED", "call"], ["FAILED", "call"], ["SKIPPED", "setup"]], heads
    assert heads[0].endswith("test_sample.py::test_passes")
    assert "the verdict named the wrong task" in log.read_text()   # a failure carries its report


def test_nothing_is_written_without_the_variable(tmp_path):
    proc = _pytest(tmp_path, "def test_ok():\n    pass\n", None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["test_sample.py"]
