"""The timing loop's parameters, typed from end to end: the config's `[timing]` section (TimingParams) and the flags
over it reach the judge's request as they are, cross to the runner as the `timing` of one `job` message (which the
runner decodes to exactly what the judge sent, or refuses), and reach the compiled helper's `run` from one call
(engine/pipeline/protocol/helper_call.py) that names every argument as binding.cpp names it: read here
from binding.cpp."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re

import pytest

from engine.config.load import load_config

from engine.config.sections import Config, TimingParams
from engine.errors import ConfigError
from engine.pipeline.protocol import messages as msg
from engine.pipeline import timer as timers
from engine.pipeline.eval_types import options_from_config
from engine.pipeline.protocol.helper_call import helper_arguments, run_helper
from engine.pipeline.protocol.types import JudgeRequest
from tests.conftest import cli
from tests.paths import REPO

BINDING = REPO / "engine" / "pipeline" / "timer" / "binding.cpp"
BASELINE = str(REPO / "tasks" / "llama_rmsnorm" / "baselines" / "forward")
ODD = TimingParams(warmup=7, min_iters=11, max_iters=13, budget_s=0.25, flush_l2=False, checks=2)


def _run_arguments() -> list[str]:
    """The names binding.cpp's PYBIND11_MODULE gives `run`'s arguments, in order."""
    text = BINDING.read_text()
    start = text.index('m.def("run", &run,')
    return re.findall(r'py::arg\("(\w+)"\)', text[start:text.index(";", start)])


def _through_the_channel(m: msg.Job) -> dict:
    return json.loads(json.dumps({**m.to_wire(), "tensors": []}))


def test_the_one_call_names_exactly_the_arguments_binding_cpp_declares():
    names = _run_arguments()
    assert len(names) == 17 and "flush_l2" in names
    given = helper_arguments(msg.Job(job=1, cid="c", mode="time", timing=ODD), lambda: None, [], [])
    assert sorted(given) == sorted(names)          # every one by its name, none more
    assert {f.name for f in dataclasses.fields(TimingParams)} <= set(names)


def test_the_helper_receives_each_timing_value_under_its_own_name():
    got: dict = {}

    class Helper:   # `run` as binding.cpp declares it: every argument required, by name
        exec(f"def run(self, *, {', '.join(_run_arguments())}):\n    got.update(locals()); return 'ok'",
             {"got": got}, locals())

    assert run_helper(Helper(), msg.Job(job=9, cid="c", mode="time", timing=ODD), print, [1], [[2]], [0], [0.5],
                      [0]) == "ok"
    assert {f.name: got[f.name] for f in dataclasses.fields(TimingParams)} == dataclasses.asdict(ODD)
    assert (got["job_id"], got["mode"], got["fresh_alphas"], got["settle_ms"]) == (9, "time", [0.5], -1.0)
    run_helper(Helper(), msg.Job(job=2, cid="c", mode="check", schedule=(0, 1)), print, [], [])
    assert got["schedule"] == [0, 1] and got["flush_l2"] is True and got["checks"] == 0   # a check job: each flushed


def test_only_helper_call_calls_the_helpers_run():
    """The runner and the judge's LocalTimer hold the helper as `timer` / `mod`: neither calls its `run` itself."""
    callers = []
    for path in (REPO / "engine").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run" and \
                    ast.unparse(node.func.value) in ("self.timer", "self.mod", "helper", "mod", "timer"):
                callers.append(str(path.relative_to(REPO)))
    assert callers == ["engine/pipeline/protocol/helper_call.py"]
    assert "run_helper(" in inspect.getsource(__import__("engine.pipeline.runner.main", fromlist=["x"]).Runner.job)
    assert "run_helper(" in inspect.getsource(__import__("engine.pipeline.judge.timer", fromlist=["x"]).LocalTimer.time)


def test_the_runner_decodes_exactly_the_timing_the_judge_sent():
    sent = msg.Job(job=4, cid="bench", mode="time", timing=ODD)
    wire = _through_the_channel(sent)
    assert wire["timing"] == dataclasses.asdict(ODD) and "flush" not in wire   # one object, the fields' own names
    assert msg.parse_request(wire) == sent and msg.parse_request(wire).timing == ODD


@pytest.mark.parametrize("change, words", [
    (lambda t: t.pop("budget_s"), "field `timing`: missing field(s) budget_s"),
    (lambda t: t.update(flush=False), "field `timing`: unknown field(s) 'flush'"),
    (lambda t: t.update(warmup="5"), "field `timing`.warmup must be int, not str"),
    (lambda t: t.update(max_iters=3), "max_iters (3) must be at least min_iters (11)"),
], ids=["dropped", "renamed", "mistyped", "inconsistent"])
def test_a_timing_object_that_is_not_the_whole_dataclass_is_refused(change, words):
    wire = _through_the_channel(msg.Job(job=4, cid="bench", mode="time", timing=ODD))
    change(wire["timing"])
    with pytest.raises(msg.MessageError) as err:
        msg.parse_request(wire)
    assert words in str(err.value)


def test_a_timing_job_needs_its_parameters():
    with pytest.raises(msg.MessageError, match="without its `timing`"):
        msg.parse_request({"type": "job", "job": 1, "cid": "c", "mode": "time"})


def test_the_config_section_and_the_flags_reach_the_judges_request(judged, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("KBENCH_WORKSPACE", str(tmp_path / "workspace"))
    (tmp_path / "xdg" / "kbench").mkdir(parents=True)
    (tmp_path / "xdg" / "kbench" / "config.toml").write_text(
        "[timing]\nwarmup = 7\nmin_iters = 11\nmax_iters = 13\nbudget_s = 0.25\nflush_l2 = false\nchecks = 4\n")
    rc, out, err = cli(capsys, "eval", "llama_rmsnorm", BASELINE, "--timing-checks", "2", "--json")
    assert rc == 0, out + err
    (request,) = judged
    assert JudgeRequest.from_json(request).timing_params == ODD          # the flag over the file's checks = 4
    assert json.loads(out)["timing_params"] == dataclasses.asdict(ODD)   # and the report says what it ran with
    cli(capsys, "eval", "llama_rmsnorm", BASELINE, "--no-flush-l2", "--warmup", "3", "--max-iters", "50",
        "--min-iters", "40", "--time-budget", "1.5")
    assert JudgeRequest.from_json(judged[-1]).timing_params == TimingParams(3, 40, 50, 1.5, False, 4)


@pytest.mark.parametrize("text, words", [
    ("[timing]\nwarmup = -1\n", "[timing] warmup must be at least 0, got -1"),
    ("[timing]\nmin_iters = 30\nmax_iters = 10\n", "[timing] max_iters (10) must be at least min_iters (30)"),
    ("[timing]\nchecks = 0\n", "[timing] checks must be at least 1"),
    ("[timing]\nbudget_s = nan\n", "[timing] budget_s must be a finite number of seconds"),
    ("[timing]\nflush = false\n", "[timing] unknown key(s) flush (did you mean flush_l2?)"),
    ("[timing]\nwarmup = \"5\"\n", "[timing] warmup: expected int, got '5'"),
])
def test_a_bad_timing_value_names_the_file_and_the_key(tmp_path, text, words):
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(None, env={}, user_file=path)
    assert words in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_the_builder_carries_the_section_and_a_flag_wins():
    cfg = load_config(None, {"timing.warmup": 9}, env={}, user_file="/nonexistent")
    assert options_from_config(cfg).timing_params == TimingParams(warmup=9)
    assert options_from_config(Config()).timing_params == TimingParams()


def test_a_change_to_the_helpers_sources_changes_its_build_key(tmp_path, monkeypatch):
    before = timers.timer_candidate().source_hash
    for name in ("kernel.cu", "binding.cpp"):
        (tmp_path / name).write_text((timers.HERE / name).read_text())
    monkeypatch.setattr(timers, "HERE", tmp_path)
    assert timers.timer_candidate().source_hash == before
    (tmp_path / "binding.cpp").write_text((tmp_path / "binding.cpp").read_text().replace('"flush_l2"', '"flush"'))
    assert timers.timer_candidate().source_hash != before
