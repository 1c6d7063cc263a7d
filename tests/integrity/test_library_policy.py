"""The library policy: who decides (flag/config, task, default), how it reaches the static gate of the evaluator
and of the evolution loop, and what it changes in the verdict."""

from __future__ import annotations

import argparse
import shutil
from types import SimpleNamespace

import pytest

from engine.candidates import load_candidate
from engine.config.load import load_config
from engine.errors import ConfigError
from engine.errors import TaskError
from engine.evolve.checks import session_checks, static_integrity_check
from engine.pipeline.eval_types import options_from_config as eval_options
from engine.integrity.policy import DEFAULT_POLICY, PolicyError, resolve_policy
from engine.integrity.static import gate_static
from engine.tasks.loader import load_task
from engine.verdict import Status
from tests.paths import FIXTURES, REPO

CUBLAS = FIXTURES / "hacks" / "vendor_cublas"


def test_default_is_pure_and_the_session_wins_over_the_task():
    assert DEFAULT_POLICY == "pure"
    task = SimpleNamespace(name="t", library_policy="engineering")
    assert resolve_policy(None, None).to_json() == {"policy": "pure", "source": "default"}
    assert resolve_policy(None, task).to_json() == {"policy": "engineering", "source": "task"}
    assert resolve_policy("pure", task).to_json() == {"policy": "pure", "source": "session"}
    with pytest.raises(PolicyError, match="pure, engineering"):
        resolve_policy("lenient", None)


def test_task_toml_declares_a_policy_and_a_bad_one_names_the_file(tmp_path):
    src = REPO / "tasks" / "gelu_bias"
    dst = tmp_path / "gelu_bias"
    shutil.copytree(src, dst)
    toml = dst / "task.toml"
    toml.write_text('library_policy = "engineering"\n' + toml.read_text())
    task = load_task(str(dst))
    assert task.library_policy == "engineering"
    assert type(task).from_json(task.to_json()).library_policy == "engineering"   # crosses to the sandbox
    toml.write_text(toml.read_text().replace('"engineering"', '"anything-goes"', 1))
    with pytest.raises(TaskError, match=r"task\.toml.*library_policy 'anything-goes'"):
        load_task(str(dst))


def test_config_and_flags_set_the_session_policy(tmp_path):
    user = tmp_path / "config.toml"
    user.write_text('[eval]\nlibrary_policy = "engineering"\n')
    cfg = load_config(None, env={}, user_file=user)
    assert cfg.eval.library_policy == "engineering"
    assert eval_options(cfg).library_policy == "engineering"
    assert load_config(None, {"eval.library_policy": "pure"}, env={}, user_file=user).eval.library_policy == "pure"
    user.write_text('[eval]\nlibrary_policy = "loose"\n')
    with pytest.raises(ConfigError, match="library_policy"):
        load_config(None, env={}, user_file=user)


def test_cli_flags_exist_on_eval_evolve_and_reevaluate():
    from engine.cli.cmd_eval import register as reg_eval
    from engine.cli.cmd_evolve import _config_flags
    from engine.cli.cmd_evolve import register as reg_evolve

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    reg_eval(sub)
    reg_evolve(sub)
    assert parser.parse_args(["eval", "t", "c", "--library-policy", "engineering"]).library_policy == "engineering"
    a = parser.parse_args(["evolve", "t", "--library-policy", "engineering"])
    assert _config_flags(a)["eval.library_policy"] == "engineering"
    assert parser.parse_args(["reevaluate", "x", "--library-policy", "pure"]).library_policy == "pure"
    with pytest.raises(SystemExit):
        parser.parse_args(["eval", "t", "c", "--library-policy", "whatever"])


def test_evaluator_gate_follows_the_policy():
    task = load_task("mnist_linear")
    cand = load_candidate(CUBLAS)
    pure = SimpleNamespace(verdicts=[])
    assert gate_static(pure, cand, task, policy=None) is False           # task has none: the default, pure
    assert [v.stage for v in pure.verdicts] == ["static", "compile"]
    assert pure.verdicts[0].status == Status.FAIL and pure.verdicts[0].data["policy"] == "pure"
    eng = SimpleNamespace(verdicts=[])
    assert gate_static(eng, cand, task, policy="engineering") is True
    v = eng.verdicts[0]
    assert v.status == Status.PASS and v.data["policy_source"] == "session" and "cuBLAS" in v.data["libraries"]


def test_evolution_loop_check_follows_the_session_policy():
    task = load_task("mnist_linear")
    cand = load_candidate(CUBLAS)
    assert static_integrity_check(task, "forward", cand).status == Status.FAIL
    (check,) = session_checks("engineering")
    v = check(task, "forward", cand)
    assert v.status == Status.PASS and v.data["policy"] == "engineering"
    assert session_checks(None)[0] is static_integrity_check


def test_a_scanner_error_is_a_skipped_verdict_not_a_crash(monkeypatch):
    from engine.integrity import static

    def boom(*a, **k):
        raise RuntimeError("grammar exploded")
    monkeypatch.setattr(static, "scan_candidate", boom)
    v = static.check_candidate(load_candidate(CUBLAS), None, None)
    assert v.status == Status.SKIPPED and "grammar exploded" in v.reason and "dynamic checks" in v.reason
