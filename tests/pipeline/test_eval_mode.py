"""Evaluation modes (engine/pipeline/eval_mode.py): what `kbench eval --upstream` / `[eval] mode = "upstream"` asks
the judge for (robust-kbench's settings modes for the direction, 5 trials, every config timed, --use_fast_math,
torch's default precision), and what kbench's own mode keeps (a direction never runs on the other direction's
upstream settings). The build and the judge are stand-ins (tests/pipeline/timing_fakes.py); the request is what a
GPU run gets."""

from __future__ import annotations

import json

import pytest

from engine.pipeline import eval_mode
from engine.tasks.loader import load_task
from tests.conftest import cli
from tests.paths import FIXTURES, REPO

LINEAR_FWD = REPO / "tasks" / "mnist_linear" / "baselines" / "forward"
LN_FWD = REPO / "tasks" / "layernorm" / "baselines" / "forward"


@pytest.fixture
def toolchains(judged, monkeypatch):
    """The toolchain each build was asked for (the stand-in build of `judged` answers)."""
    from engine.harness.build import stage as builds
    seen = []
    fake = builds.build_candidate

    def build(candidate, cache_root, toolchain, **kw):
        seen.append(toolchain)
        return fake(candidate, cache_root, toolchain, **kw)
    monkeypatch.setattr(builds, "build_candidate", build)
    return seen


def _rkb_configs(task, direction):
    return [c.name for c in task.configs if "robust-kbench" in c.tags and f"from-{direction}" in c.tags]


def test_upstream_mode_asks_for_upstreams_settings_trials_flags_and_precision(judged, toolchains, capsys):
    rc, out, err = cli(capsys, "eval", "mnist_linear", str(LINEAR_FWD), "--upstream", "--json")
    assert rc == 0, out + err
    (req,) = judged
    task = load_task("mnist_linear")
    assert req["configs"] == _rkb_configs(task, "forward")          # upstream's settings, not kbench's own configs
    assert req["timing_configs"] is None                            # every checked config timed
    assert req["trials"] == 5
    assert req["numerics"]["cudnn_tf32"] is True and req["numerics"]["matmul_tf32"] is False
    assert toolchains[0].extra_nvcc == ("--use_fast_math",)
    report = json.loads(out)
    assert report["mode"]["mode"] == "upstream" and report["mode"]["nvcc_flags"] == ["--use_fast_math"]
    # a built-in task's reference is kbench's own rewrite: upstream never drew for it, kbench's seeds stay
    assert req["upstream_draws"] is False and report["mode"]["seeds"] == "kbench"
    # upstream compares with its float32 reference only: no float64 second opinion (engine/pipeline/judge/exact.py)
    assert req["float64_opinion"] is False and report["mode"]["float64_opinion"] is False
    assert "float32 reference only" in eval_mode.plan(task, "forward", eval_mode.UPSTREAM).describe()


def test_kbench_mode_keeps_its_own_rules(judged, toolchains, capsys):
    rc, out, err = cli(capsys, "eval", "mnist_linear", str(LINEAR_FWD), "--json")
    assert rc == 0, out + err
    (req,) = judged
    assert req["trials"] == 2 and req["numerics"] is None and toolchains[0].extra_nvcc == ()
    assert req["upstream_draws"] is False and req["float64_opinion"] is True
    assert json.loads(out)["mode"]["mode"] == "kbench"


def test_a_forward_run_leaves_out_the_backward_files_settings(judged, capsys):
    """robust-kbench's layernorm backward settings (batch 32 x 64 x 256 x 256 among them) are not its forward's."""
    task = load_task("layernorm")
    backward_only = [c.name for c in task.configs if "from-backward" in c.tags and "from-forward" not in c.tags]
    assert backward_only
    rc, out, err = cli(capsys, "eval", "layernorm", str(LN_FWD), "--json")
    assert rc == 0, out + err
    (req,) = judged
    assert req["configs"] and not set(backward_only) & set(req["configs"])
    assert set(req["configs"]) == set(c.name for c in task.configs) - set(backward_only)


def test_config_file_mode_is_the_users_default(judged, toolchains, capsys, tmp_path, monkeypatch):
    cfg = tmp_path / "xdg" / "kbench" / "config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text('[eval]\nmode = "upstream"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    rc, out, err = cli(capsys, "eval", "mnist_linear", str(LINEAR_FWD))
    assert rc == 0, out + err
    assert judged[0]["trials"] == 5 and "mode upstream: 5 trials per config" in err
    rc, out, err = cli(capsys, "eval", "mnist_linear", str(LINEAR_FWD), "--trials", "3")   # a flag wins
    assert judged[1]["trials"] == 3


def test_kernelbench_upstream_mode_keeps_torchs_precision(judged, capsys):
    problem = FIXTURES / "kernelbench" / "matmul_relu.py"
    cand = FIXTURES / "kernelbench" / "candidates" / "matmul_relu_correct.py"
    rc, out, err = cli(capsys, "eval", str(problem), str(cand), "--upstream")
    assert rc == 0, out + err
    assert judged[0]["numerics"]["cudnn_tf32"] is True and judged[0]["trials"] == 5
    assert judged[0]["upstream_draws"] is True and "upstream's trial seeds" in err
    rc, out, err = cli(capsys, "eval", str(problem), str(cand))
    assert judged[1]["numerics"] is None          # kbench's: TF32 off in judge and runner (engine/harness/numerics)
    assert judged[1]["upstream_draws"] is False


def test_upstream_mode_on_a_task_from_neither_benchmark_is_one_error_line(capsys):
    rc, out, err = cli(capsys, "eval", "layernorm_lastdim", str(REPO / "tasks" / "layernorm_lastdim" / "baselines" /
                                                                  "forward"), "--upstream")
    assert rc == 2 and "comes from neither robust-kbench nor KernelBench" in err and "Traceback" not in err


def test_the_plan_groups_an_imported_folders_configs_by_settings_mode():
    task = load_task(FIXTURES / "robust_kbench" / "linear")
    fwd, bwd = eval_mode.plan(task, "forward", "upstream"), eval_mode.plan(task, "backward", "upstream")
    assert list(fwd.settings) == ["single", "multi-input", "multi-init", "multi"]
    assert len(fwd.settings["multi"]) == 8 and len(fwd.configs) == 13
    assert len(bwd.configs) < len(fwd.configs)       # the backward file's settings only
    assert set(bwd.configs) == set(eval_mode.plan(task, "backward", "kbench").configs)
    assert fwd.upstream_draws and bwd.upstream_draws                   # upstream's own code: its seeds and draws
    assert not eval_mode.plan(task, "forward", "kbench").upstream_draws
    assert "upstream's trial seeds" in fwd.describe()



def test_the_candidates_toolchain_is_the_machines_with_the_modes_flags():
    # evaluate() and the published-kernel prebuild both ask the plan, so a prebuild fills the entries evaluate reads
    from tests.harness.test_toolchain_cache import fake_toolchain
    base = fake_toolchain()
    task = load_task("mnist_linear")
    assert eval_mode.plan(task, "forward", "kbench").candidate_toolchain(base) == base
    upstream = eval_mode.plan(task, "forward", "upstream").candidate_toolchain(base)
    assert upstream.extra_nvcc == ("--use_fast_math",) and upstream.key() != base.key()
    assert upstream.archs == base.archs and upstream.nvcc == base.nvcc
