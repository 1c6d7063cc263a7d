"""engine.procs reads a child's result file that a child running candidate code may have written anything into:
bytes that are not UTF-8 or JSON, or JSON that is not an object. Each is an empty result (a child that did not
finish, so `crashed` and `describe_crash` work), never an exception in the parent."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.procs import StepFolder, await_child


@pytest.mark.parametrize("content", [b"\xff\xfe not text", b"{not json", b"[1, 2, 3]", b'"finished"', b"null"])
def test_a_result_file_that_is_not_a_json_object_is_an_unfinished_child(tmp_path: Path, content: bytes) -> None:
    step = StepFolder(tmp_path)
    (step.box / "result.json").write_bytes(content)
    step.log.write_bytes(b"")
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    out = await_child(proc, step, 30, time.monotonic())
    assert out.result == {} and out.returncode == 0
    assert out.crashed and out.describe_crash() == "the evaluator process exited with code 0"


def test_a_json_object_is_read_as_written(tmp_path: Path) -> None:
    step = StepFolder(tmp_path)
    (step.box / "result.json").write_text('{"finished": true, "n": 3}')
    step.log.write_bytes(b"")
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    out = await_child(proc, step, 30, time.monotonic())
    assert out.result == {"finished": True, "n": 3} and not out.crashed
