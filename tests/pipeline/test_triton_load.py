"""What the runner is handed for a Triton candidate, without a GPU: the build's src/ folder staged read-only into the
run folder, a `load` message that says it is Triton (and survives the wire's strict parsing), and the runner's
loader importing kernel.py and the generated binding.py from there, the binding's `forward` calling the launcher."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from engine.candidates import load_candidate
from engine.harness.build.stage import build_candidate
from engine.harness.toolchain import detect
from engine.pipeline.protocol import messages as msg
from engine.pipeline.candidate_spec import candidate_spec
from engine.pipeline.runner.main import load_candidate as runner_load
from engine.pipeline.judge.runner_process import make_run_dir, stage_load
from engine.tasks.glue.generated import materialise
from engine.tasks.loader import load_task
from tests.paths import FIXTURES


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    task = load_task("llama_rmsnorm")
    cand = materialise(load_candidate(FIXTURES / "triton" / "llama_rmsnorm_forward"), task, "forward")
    cache = tmp_path_factory.mktemp("cache")
    tc = detect()
    build = build_candidate(cand, cache, tc)
    assert build.ok, build.error
    return cand, candidate_spec(cand, build, cache, tc)


def test_the_build_keeps_both_files_and_the_runner_loads_them_from_its_readonly_copy(built):
    cand, spec = built
    assert spec.format == "triton" and spec.so_path is None
    assert sorted(p.name for p in Path(spec.py_path).iterdir()) == ["binding.py", "kernel.py"]
    run = make_run_dir()
    try:
        load = stage_load(run, spec)
        assert load.triton and Path(load.py_path).parent == run.ro
        again = msg.parse_request(load.to_wire())          # the judge's message, parsed as the runner parses it
        assert isinstance(again, msg.Load) and again.triton and again.py_path == load.py_path
        module = runner_load(again)
        assert callable(module.forward)
        kernel = sys.modules[f"{spec.module_name}_kernel"]
        assert kernel.__file__.startswith(str(run.ro)) and callable(kernel.kb_forward)
        assert "kernel" not in sys.modules or sys.modules["kernel"] is not kernel   # the alias is gone after import
    finally:
        shutil.rmtree(run.root, ignore_errors=True)


def test_a_plain_load_message_is_not_taken_for_triton():
    load = msg.parse_request(msg.Load(module_name="m", so_path="/x.so").to_wire())
    assert load.triton is False and "triton" not in msg.Load(module_name="m", so_path="/x.so").to_wire()
