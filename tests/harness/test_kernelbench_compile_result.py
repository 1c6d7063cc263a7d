"""The KernelBench compile child's result (engine/harness/kernelbench/child_types.py): the child imports the candidate's
Python, which may overwrite the result file; the build reads it strictly and a forged or garbled one fails the
build with a clear message, never an exception."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from engine.candidates import Candidate
from engine.harness.build import stage as B
from engine.harness.kernelbench.child_types import CompileRequest, CompileResult, ExtensionBuild
from engine.harness.toolchain import Toolchain
from engine.procs import ChildOutcome, StepFolder, await_child
from tests.paths import REPO

CAND = Candidate("kernelbench", {"model_new.py": "import torch.utils.cpp_extension\nclass ModelNew:\n    pass\n"})


def _child_writing(monkeypatch: pytest.MonkeyPatch, content: bytes) -> None:
    """run_child replaced by a child that only leaves `content` as its result file, read the real way."""
    def run_child(module: str, request: dict[str, Any], *, timeout_s: float, **_: Any) -> ChildOutcome:
        assert module == "engine.harness.kernelbench.compile" and CompileRequest.from_json(request).py_path
        (Path(request["py_path"]).parent.parent / "child").mkdir(exist_ok=True)
        step = StepFolder(Path(request["py_path"]).parent.parent / "child")
        (step.box / "result.json").write_bytes(content)
        step.log.write_text("")
        proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
        return await_child(proc, step, timeout_s, time.monotonic())
    monkeypatch.setattr(B, "run_child", run_child)


def test_a_good_result_round_trips_and_builds(toolchain: Toolchain, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    sent = CompileResult(finished=True, extensions=[ExtensionBuild("ext", "load_inline", ok=True)])
    assert CompileResult.from_json(json.loads(json.dumps(sent.to_json()))) == sent
    _child_writing(monkeypatch, json.dumps(sent.to_json()).encode())
    res = B.build_candidate(CAND, tmp_path, toolchain)
    assert res.ok, res.error


@pytest.mark.parametrize("content, says", [
    (b'{"finished": true, "extensions": "all built"}', "extensions"),
    (b'{"finished": true, "extensions": [{"via": "load_inline", "ok": true}]}', "extensions[0].name"),
    (b'{"finished": true, "versions": [1, 2]}', "versions[0]"),
    (json.dumps({"finished": True, "extensions": [{"name": "e", "via": "load", "ok": True}] * 300}).encode(),
     "more than 256"),
])
def test_a_forged_result_fails_the_build_with_the_reason(toolchain: Toolchain, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, content: bytes,
                                                         says: str) -> None:
    _child_writing(monkeypatch, content)
    res = B.build_candidate(CAND, tmp_path, toolchain)
    assert not res.ok and res.failure == "compile", res
    assert "left a result kbench cannot read" in res.error and says in res.error, res.error


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe{garbage", b"[1, 2]"])
def test_a_result_that_is_not_a_json_object_is_an_unfinished_import(toolchain: Toolchain, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    content: bytes) -> None:
    _child_writing(monkeypatch, content)
    res = B.build_candidate(CAND, tmp_path, toolchain)
    assert not res.ok and res.failure == "internal" and "did not finish" in res.error, res


def test_the_child_writes_what_the_parent_reads(tmp_path: Path) -> None:
    py = tmp_path / "model_new.py"
    py.write_text("raise ValueError('no model here')\n")
    req = tmp_path / "request.json"
    out = tmp_path / "result.json"
    req.write_text(json.dumps(CompileRequest(str(py), "kb_probe", result_path=str(out)).to_json()))
    proc = subprocess.run([sys.executable, "-m", "engine.harness.kernelbench.compile", str(req)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = CompileResult.from_json(json.loads(out.read_text()))
    assert res.finished and res.extensions == [] and res.import_error == "ValueError: no model here"
    assert "no model here" in (res.traceback or "")
