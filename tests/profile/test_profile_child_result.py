"""The profile child's request and result (engine/pipeline/protocol/profile_types.py): the child runs the candidate's
code, so the parent reads the result file strictly and a forged or garbled one is a failure with the reason, never an
exception."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.pipeline.protocol.profile_types import (MAX_RESULT_BYTES, OpRow, ProfileRequest, ProfileResult,
                                           read_result)
from engine.pipeline.profiling import judge_torch_result
from tests.paths import REPO


def test_a_good_result_round_trips_through_the_file(tmp_path: Path) -> None:
    sent = ProfileResult(finished=True, ok=True, candidate_ops=[OpRow("my_kernel", 12.5, 1)],
                         reference_ops=[OpRow("aten::mm", 30.0, 2), OpRow("copy", 1.0, 1)])
    path = tmp_path / "result.json"
    path.write_text(json.dumps(sent.to_json()))
    assert read_result(path) == (sent, "")
    assert judge_torch_result(read_result(path), 0, "") == (sent, "")


def test_the_request_round_trips_without_pydantic() -> None:
    req = ProfileRequest(task={"name": "t"}, direction="forward", config="small", mode="ncu", result_path="/r.json",
                         candidate={"type": "load", "module_name": "m", "so_path": "/x.so"}, launches=3)
    assert ProfileRequest.from_json(json.loads(json.dumps(req.to_json()))) == req


@pytest.mark.parametrize("content, reason", [
    (b"\xff\xfe\x00garbage", "not JSON"),
    (b"{not json", "not JSON"),
    (b"[1, 2, 3]", "expected a JSON object"),
    (b'{"finished": true, "ok": true, "candidate_ops": "all fast"}', "candidate_ops"),
    (b'{"finished": true, "ok": true, "candidate_ops": [{"name": "k", "device_us": "fast", "calls": 1}]}',
     "candidate_ops[0].device_us"),
    (b'{"finished": true, "ok": true, "reference_ops": [{"name": "k"}]}', "reference_ops[0].device_us"),
    (json.dumps({"finished": True, "ok": True, "candidate_ops": [{"name": "k", "device_us": 1.0, "calls": 1}] * 100})
     .encode(), "more than 64 ops"),
    (b'{"finished": true, "error": "' + b"x" * (MAX_RESULT_BYTES + 10) + b'"}', "over"),
])
def test_a_forged_result_file_is_a_failure_with_the_reason(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "result.json"
    path.write_bytes(content)
    result, problem = read_result(path)
    assert result == ProfileResult() and reason in problem, problem
    res, failed = judge_torch_result((result, problem), 0, "line 1\nline 2\n")
    assert res == ProfileResult()
    assert failed.startswith("the profiler's result could not be read (") and reason in failed, failed
    assert failed.endswith("it exited with code 0: line 1 | line 2"), failed


def test_no_result_file_is_the_exit_code_and_an_unfinished_one_too(tmp_path: Path) -> None:
    missing = read_result(tmp_path / "none.json")
    assert missing == (ProfileResult(), "")
    assert judge_torch_result(missing, -9, "Killed") == (ProfileResult(), "the profiler exited with code -9: Killed")
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"ok": True}))   # no `finished`: the child died after writing part of it
    res, failed = judge_torch_result(read_result(path), 0, "")
    assert failed == "the profiler exited with code 0: " and res.ok


def test_the_childs_error_is_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"finished": True, "error": "RuntimeError: CUDA error: " + "y" * 5000}))
    _, failed = judge_torch_result(read_result(path), 0, "")
    assert failed.startswith("RuntimeError: CUDA error: ") and len(failed) == 2000


def test_the_child_writes_what_the_parent_reads(tmp_path: Path) -> None:
    """The real child, on a request whose task it cannot read: it reports the error in a result that parses."""
    out = tmp_path / "result.json"
    req = tmp_path / "request.json"
    req.write_text(json.dumps(ProfileRequest(task={}, direction="forward", config="small", mode="torch",
                                             result_path=str(out)).to_json()))
    proc = subprocess.run([sys.executable, "-m", "engine.pipeline.runner.profile_child", str(req)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result, problem = read_result(out)
    assert problem == "" and result.finished and not result.ok and result.error, (problem, result)
    assert judge_torch_result((result, problem), 0, "")[1] == result.error
