"""One rule from the config to EvalOptions for every command: `kbench eval` reads the user's `[eval]` section as
`kbench evolve`, `kbench reevaluate` and the app do (engine.pipeline.eval_types.options_from_config), a flag
overrides its key on each of them, and the flags they share carry one help text, whose defaults come from the
config's own dataclass. The build and the judge of `kbench eval` are stand-ins (tests/pipeline/timing_fakes.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from engine.cli import build_parser
from engine.cli.cmd_eval import eval_options as eval_command_options
from engine.cli.cmd_evolve import _config_flags as evolve_config_flags
from engine.config.load import load_config
from engine.config.sections import Config, EvalConfig
from engine.pipeline.eval_types import options_from_config as session_options
from engine.pipeline.eval_types import EvalOptions
from tests.conftest import cli
from tests.paths import REPO

BASELINE = str(REPO / "tasks" / "llama_rmsnorm" / "baselines" / "forward")
SHARED = ("--trials", "--timeout", "--no-compile-baseline", "--time-config", "--library-policy", "--warmup",
          "--min-iters", "--max-iters", "--time-budget", "--timing-checks", "--no-flush-l2")
# what the config decides; the rest of EvalOptions is each run's own (its GPU, configs, caches)
FROM_CONFIG = ("trials", "timeout_s", "timing_configs", "baselines", "library_policy", "mode", "timing_params",
               "gpu_keep")

USER_CONFIG = ('[eval]\ntrials = 4\ntiming_configs = ["odd-small"]\ntimeout_s = 321.0\ncompile_baseline = false\n'
               'library_policy = "engineering"\ngpu_keep = 0.5\n')


@pytest.fixture
def user_config(monkeypatch, tmp_path):
    """A user config file where engine.config looks for it ($XDG_CONFIG_HOME/kbench/config.toml), and a workspace
    without one; returns a writer of the file."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("KBENCH_WORKSPACE", str(tmp_path / "workspace"))
    path = tmp_path / "xdg" / "kbench" / "config.toml"
    path.parent.mkdir(parents=True)

    def write(text: str) -> Path:
        path.write_text(text)
        return path
    return write


def _subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _helps(name: str) -> dict[str, str]:
    return {opt: a.help for a in _subparser(name)._actions for opt in a.option_strings if opt in SHARED}


def _picked(opts: EvalOptions) -> dict:
    return {k: getattr(opts, k) for k in FROM_CONFIG}


def test_eval_takes_its_options_from_the_user_config(judged, capsys, user_config):
    user_config(USER_CONFIG)
    rc, out, err = cli(capsys, "eval", "llama_rmsnorm", BASELINE, "--no-profile")
    assert rc == 0, out + err
    (request,) = judged
    assert request["trials"] == 4 and request["timing_configs"] == ["odd-small"], request
    assert request["baselines"] == ["eager"] and request["deadline_s"] == 321.0 and request["gpu_keep"] == 0.5


def test_a_flag_overrides_its_config_key_on_eval(judged, capsys, user_config):
    user_config(USER_CONFIG)
    rc, out, err = cli(capsys, "eval", "llama_rmsnorm", BASELINE, "--no-profile", "--trials", "3",
                       "--time-config", "bench", "--timeout", "100")
    assert rc == 0, out + err
    (request,) = judged
    assert request["trials"] == 3 and request["timing_configs"] == ["bench"] and request["deadline_s"] == 100.0
    assert request["baselines"] == ["eager"]            # what no flag said still comes from the file


def test_eval_and_evolve_build_the_same_options_from_the_same_config_and_flags(user_config):
    user_config(USER_CONFIG + 'mode = "kbench"\n')
    for flags in ([], ["--trials", "3", "--time-config", "all", "--timeout", "50", "--library-policy", "pure"]):
        ev = build_parser().parse_args(["eval", "llama_rmsnorm", BASELINE, *flags])
        evo = build_parser().parse_args(["evolve", "llama_rmsnorm", *flags])
        ours = eval_command_options(ev)
        sessions = session_options(load_config(Path(evo.workspace or "workspace"), evolve_config_flags(evo)))
        assert _picked(ours) == _picked(sessions), flags
    assert _picked(ours)["trials"] == 3 and _picked(ours)["timing_configs"] == ["all"]


def test_the_builder_reads_the_section_and_lets_overrides_win_where_given():
    cfg = Config(eval=EvalConfig(trials=5, timing_configs=["bench"], compile_baseline=False, profile="all"))
    opts = session_options(cfg, trials=None, gpu=1)
    assert (opts.trials, opts.timing_configs, opts.baselines, opts.profile, opts.gpu) == (5, ["bench"], ("eager",),
                                                                                          True, 1)
    assert session_options(cfg, trials=2).trials == 2
    assert session_options(Config()).trials is None     # the mode's default, decided in eval_mode.plan


def test_the_commands_document_the_same_defaults_for_the_flags_they_share():
    ev, evo, re = _helps("eval"), _helps("evolve"), _helps("reevaluate")
    assert set(ev) == set(SHARED) and ev == evo == re
    assert "default: [eval] trials, else 2; 5 in the upstream mode" in ev["--trials"]
    assert "default: [eval] timeout_s, else 600" in ev["--timeout"]


def test_a_bad_trials_value_is_bad_input_naming_the_key(judged, capsys, user_config):
    path = user_config("[eval]\ntrials = 0\n")
    rc, out, err = cli(capsys, "eval", "llama_rmsnorm", BASELINE)
    assert rc == 2 and judged == []
    assert "[eval] trials must be at least 1, got 0" in err and str(path) in err, err


def test_a_gpu_keep_outside_0_to_1_is_bad_input_naming_the_key(judged, capsys, user_config):
    path = user_config("[eval]\ngpu_keep = 1.5\n")
    rc, out, err = cli(capsys, "eval", "llama_rmsnorm", BASELINE)
    assert rc == 2 and judged == []
    assert "[eval] gpu_keep is a share of the GPU's memory, from 0 to 1; got 1.5" in err and str(path) in err, err
