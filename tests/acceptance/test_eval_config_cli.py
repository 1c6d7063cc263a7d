"""`kbench eval` as a user runs it, with settings in ~/.config/kbench/config.toml: the installed console script
honours `[eval] trials` and `timing_configs` and a `[timing]` parameter as `kbench evolve` would, a flag wins over
its key, and the JSON report says what the evaluation was set to run (on this machine without a GPU: after the
build, exit 3). A bad value is one line naming the file and the key, exit 2, before any build."""

from __future__ import annotations

import json

import pytest

from tests.paths import REPO
from tests.user_kbench import one_error_line

CANDIDATE = str(REPO / "tasks" / "gelu_bias" / "baselines" / "forward")
CONFIG = '[eval]\ntrials = 3\ntiming_configs = ["odd-small", "bench"]\n\n[timing]\nwarmup = 9\nflush_l2 = false\n'


@pytest.mark.slow     # builds the candidate once (nvcc), into the suite's shared cache
def test_eval_honours_the_users_eval_and_timing_sections_and_flags_win(user):
    user.config(CONFIG)
    first = user.run("eval", "gelu_bias", CANDIDATE, "--json", timeout=900)
    assert first.returncode in (0, 1, 3), first.stdout[-2000:] + first.stderr[-3000:]   # 3: no GPU here
    report = json.loads(first.stdout)
    assert report["mode"]["trials"] == 3 and report["mode"]["timing_configs"] == ["odd-small", "bench"]
    assert report["timing_params"] == {"warmup": 9, "min_iters": 20, "max_iters": 2000, "budget_s": 0.4,
                                       "flush_l2": False, "checks": 3}
    again = user.run("eval", "gelu_bias", CANDIDATE, "--json", "--trials", "4", "--warmup", "2", "--time-config",
                     "all", timeout=600)
    assert again.returncode == first.returncode, again.stderr[-3000:]
    report = json.loads(again.stdout)
    assert report["mode"]["trials"] == 4 and report["mode"]["timing_configs"] == ["all"]
    assert report["timing_params"]["warmup"] == 2 and report["timing_params"]["flush_l2"] is False


@pytest.mark.parametrize("text, words", [
    ("[timing]\nwarmup = -1\n", "[timing] warmup must be at least 0, got -1"),
    ("[eval]\ntrials = 0\n", "[eval] trials must be at least 1, got 0"),
    ("[timing]\nflush = false\n", "[timing] unknown key(s) flush (did you mean flush_l2?)"),
])
def test_a_bad_value_in_the_config_file_is_one_line_naming_the_file_and_the_key(user, text, words):
    path = user.config(text)
    proc = user.run("eval", "gelu_bias", CANDIDATE)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = one_error_line(proc)
    assert words in line and str(path) in line, line
