"""`kbench eval`'s timing selection: by default the judge is asked to time the task's `bench` and `timed` configs
(engine.tasks.model.default_timing_configs), `--time-config all` every config, names only those; the output says
which configs were not timed and why. The build and the judge are stand-ins (tests/pipeline/timing_fakes.py)."""

from __future__ import annotations

import json

import pytest

from engine.cli import main
from engine.cli.common import check_config_names
from engine.errors import ConfigError, KbenchError
from engine.tasks.loader import load_task
from tests.paths import REPO

BASELINE = REPO / "tasks" / "llama_rmsnorm" / "baselines" / "forward"


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["eval", "llama_rmsnorm", str(BASELINE), "--no-profile", "--library-policy", "pure", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_eval_asks_the_judge_to_time_bench_and_the_timed_configs_only(judged, capsys):
    rc, out, err = cli(capsys)
    assert rc == 0, out + err
    (request,) = judged
    assert request["configs"] is None                                   # correctness: every config
    assert request["timing_configs"] == ["bench", "rkb-single-1"]
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and line.split()}
    assert "not timed" in rows["odd-small"] and "not timed" in rows["rkb-multi-3"]
    assert "not timed" not in rows["bench"] and "2.00x" in rows["bench"] and "2.00x" in rows["rkb-single-1"]
    assert ("7 of 9 configs not timed (the default times `bench` and configs tagged `timed`; "
            "--time-config all times every config)") in out
    assert "geomean speedup vs eager 2.00x over bench, rkb-single-1" in out


def test_time_config_all_times_every_config(judged, capsys):
    rc, out, err = cli(capsys, "--time-config", "all")
    assert rc == 0, out + err
    assert judged[-1]["timing_configs"] is None                          # the judge's "every config"
    assert "not timed" not in out and "over " not in out


def test_named_time_configs_are_passed_as_given_and_the_json_says_what_was_timed(judged, capsys):
    rc, out, err = cli(capsys, "--time-config", "odd-small", "--json")
    assert rc == 0, out + err
    assert judged[-1]["timing_configs"] == ["odd-small"]
    report = json.loads(out)
    assert report["timed_by"] == "named"
    assert [c["name"] for c in report["configs"] if c["timed"]] == ["odd-small"]
    timing = next(v for v in report["verdicts"] if v["stage"] == "timing")
    assert timing["data"]["timed"] == ["odd-small"] and len(timing["data"]["not_timed"]) == 8


def test_a_config_subset_is_timed_within_the_default_or_whole(judged, capsys):
    rc, out, err = cli(capsys, "--config", "odd-small", "--config", "tiny-values")
    assert rc == 0, out + err
    assert judged[-1]["configs"] == ["odd-small", "tiny-values"] and judged[-1]["timing_configs"] is None
    rc, out, err = cli(capsys, "--config", "odd-small", "--config", "bench")
    assert judged[-1]["timing_configs"] == ["bench"]


def test_all_mixed_with_names_is_refused_before_any_compile(judged, capsys):
    rc, out, err = cli(capsys, "--time-config", "all", "--time-config", "bench")
    assert rc == 2 and out == "" and judged == []
    assert '--time-config: "all" (time every config) cannot be combined with config names (bench)' in err


def test_check_config_names_accepts_all_only_for_timing():
    task = load_task("llama_rmsnorm")
    check_config_names(task, ["all"], "--time-config", allow_all=True)
    check_config_names(task, ["bench", "rkb-single-1"], "--time-config", allow_all=True)
    with pytest.raises(ConfigError, match="cannot be combined"):
        check_config_names(task, ["all", "bench"], "--time-config", allow_all=True)
    with pytest.raises(KbenchError, match="no config of that name"):
        check_config_names(task, ["all"], "--config")
    with pytest.raises(KbenchError, match="did you mean 'bench'"):
        check_config_names(task, ["all", "bech"][1:], "--time-config", allow_all=True)
