"""engine.harness.build.wait: what a build is about to wait on, read from the cache before it starts (no compiler
runs); the local executor says a shared wait (torch's precompiled header) once, and the loop emits it as a
LongWait event."""

from __future__ import annotations

import json
import threading

import pytest

from engine.candidates import Candidate, load_candidate
from tests.doubles.evaluator import FakeEvaluator
from engine.evolve.local_executor import LocalPipelineExecutor
from engine.evolve.loop import Budgets, EvolutionSession
from engine.harness.build.result import BuildResult
from engine.harness.build.wait import PCH_WAIT, SINGLE_CU_WAIT, expected_wait
from engine.harness.pch import PCH_BASENAME, pch_dir
from engine.harness.toolchain import detect
from engine.pipeline.eval_types import EvalOptions
from engine.proposers.tuner import TunerProposer
from engine.tasks.loader import builtin_tasks_dir, load_task
from tests.conftest import HAS_NVCC
from tests.paths import FIXTURES

pytestmark = pytest.mark.skipif(not HAS_NVCC, reason="needs nvcc (the toolchain's key names the cache)")


@pytest.fixture(scope="module")
def tc():
    return detect()


@pytest.fixture
def native():
    return load_candidate(builtin_tasks_dir() / "gelu_bias" / "baselines" / "forward")


def test_a_native_build_waits_for_the_pch_until_it_is_there(tmp_path, tc, native):
    assert expected_wait(native, tmp_path, tc) == PCH_WAIT
    d = pch_dir(tmp_path, tc)
    d.mkdir(parents=True)
    (d / (PCH_BASENAME + ".gch")).write_bytes(b"")
    assert expected_wait(native, tmp_path, tc) is None        # an ordinary compile: "compiling" says it


def test_a_pch_that_failed_before_is_not_awaited(tmp_path, tc, native):
    d = pch_dir(tmp_path, tc)
    d.mkdir(parents=True)
    (d / "FAILED").write_text("no")
    assert expected_wait(native, tmp_path, tc) is None


def test_a_cached_build_waits_for_nothing(tmp_path, tc, native):
    entry = tmp_path / "builds" / tc.key() / native.source_hash
    entry.mkdir(parents=True)
    (entry / "result.json").write_text(json.dumps(BuildResult(
        ok=False, format="native", source_hash=native.source_hash, module_name=None, so_path=None, seconds=1.0,
        error="x", failure="compile").to_json()))
    assert expected_wait(native, tmp_path, tc) is None


def test_foreign_formats_say_what_their_build_is(tmp_path, tc):
    kb = load_candidate(FIXTURES / "kernelbench" / "candidates" / "scaled_swish_compile_error.py")
    assert "scaled_swish_compile_error.py" in expected_wait(kb, tmp_path, tc)
    plain = Candidate("kernelbench", {"new.py": "class ModelNew: pass\n"})
    assert expected_wait(plain, tmp_path, tc) is None          # no load_inline: nothing is built
    single = Candidate("robust-kbench", {"kernel.cu": "// PYBIND11_MODULE\n"})
    assert expected_wait(single, tmp_path, tc) == SINGLE_CU_WAIT


def test_the_executor_says_the_pch_wait_once(tmp_path, native):
    ex = LocalPipelineExecutor(load_task("gelu_bias"), "forward", EvalOptions(cache_root=tmp_path), gpus=[None],
                               build_fn=lambda *a: {}, gpu_fn=lambda *a, **k: None, processes=False)
    try:
        assert ex.expected_wait(native) == PCH_WAIT
        other = Candidate("native", {**native.files, "kernel.cu": native.files["kernel.cu"] + "\n// v2\n"})
        assert ex.expected_wait(other) is None
    finally:
        ex.close(wait=False)


class _Waiting(FakeEvaluator):
    """The fake evaluator, saying that its first build waits for the PCH."""

    def __init__(self, task):
        super().__init__(task)
        self.said = threading.Lock()

    def expected_wait(self, candidate):
        return PCH_WAIT if self.said.acquire(blocking=False) else None


def test_the_loop_emits_the_wait_as_a_long_wait_event(ws):
    task = load_task("gelu_bias")
    fake = _Waiting(task)
    s = EvolutionSession(ws, "waits", task, TunerProposer(), fake, budgets=Budgets(generations=1, population=2))
    events = []
    s.subscribe(events.append)
    s.run()
    fake.close()
    waits = [e for e in events if e.kind == "LongWait"]
    assert len(waits) == 1 and waits[0].what == PCH_WAIT and waits[0].stage == "compile"
    cid = waits[0].candidate
    assert waits[0].line().endswith(f"{cid} compile: {PCH_WAIT}")
    i = events.index(waits[0])
    assert any(e.kind == "CandidateCommitted" and e.candidate == cid for e in events[:i])
    assert any(e.kind == "StageFinished" and e.candidate == cid for e in events[i:])


def test_a_kernelbench_build_waits_for_the_pch_first_then_says_its_own_wait_once_it_is_said(tmp_path):
    kb = load_candidate(FIXTURES / "kernelbench" / "candidates" / "scaled_swish_compile_error.py")
    ex = LocalPipelineExecutor(load_task("gelu_bias"), "forward", EvalOptions(cache_root=tmp_path), gpus=[None],
                               build_fn=lambda *a: {}, gpu_fn=lambda *a, **k: None, processes=False)
    try:
        first = ex.expected_wait(kb)
        assert first.startswith(PCH_WAIT + ", then building the extension scaled_swish_compile_error.py"), first
        assert ex.expected_wait(kb) == first[len(PCH_WAIT + ", then "):]
    finally:
        ex.close(wait=False)
