"""`kbench eval`'s defaults for a built candidate: the baselines come from the disk cache (`--fresh-baselines`
measures them again), and the profile runs only when asked for, after the verdict is printed. The build and the
judge are stand-ins (tests/pipeline/timing_fakes.py); tests/pipeline/test_baseline_cache.py tests the cache itself."""

from __future__ import annotations

import json

import pytest

from engine.cli import main
from engine.verdict import Stage, Status, Verdict
from tests.paths import REPO

BASELINE = REPO / "tasks" / "llama_rmsnorm" / "baselines" / "forward"


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["eval", "llama_rmsnorm", str(BASELINE), "--library-policy", "pure", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def profiled(monkeypatch) -> list[str]:
    """The profile stage replaced: the configs it was asked to profile, in order."""
    calls: list[str] = []

    def stage(task, candidate, direction, opts, peaks):
        calls.append(direction)
        return Verdict(Stage.PROFILE, Status.PASS, "profiled", {"text": "PROFILE SUMMARY: memory-bound"})
    monkeypatch.setattr("engine.pipeline.profiling.profile_stage", stage)
    return calls


def test_the_second_eval_hands_the_judge_the_cached_baselines_and_fresh_baselines_do_not(judged, profiled, capsys):
    rc, out, err = cli(capsys, "--json")
    assert rc == 0, out + err
    first = json.loads(out)
    assert first["baselines"]["cache"] == "miss" and first["baselines"]["kept"] == ["bench", "rkb-single-1"]
    assert judged[0]["cached_baselines"] is None
    rc, out, err = cli(capsys)
    assert rc == 0, out + err
    (cached,) = judged[1]["cached_baselines"].values()
    assert set(cached) == {"bench", "rkb-single-1"} and cached["bench"]["eager"]["median_ms"] == 0.2
    rc, out, err = cli(capsys, "--fresh-baselines", "--json")
    assert rc == 0 and judged[2]["cached_baselines"] is None
    assert json.loads(out)["baselines"]["cache"] == "fresh"
    assert "baselines: measured now (--fresh-baselines) and kept in the cache" in cli(capsys, "--fresh-baselines")[1]
    assert profiled == []                                       # no profile unless asked for


def test_the_time_line_says_where_the_judges_time_went(judged, profiled, capsys):
    rc, out, err = cli(capsys)
    assert rc == 0
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("build "))
    assert "(cache hit), judge 1.0s" in line and "total" in line, line
    phases = json.loads(cli(capsys, "--json")[1])["phases"]
    assert phases["build.cache_hit"] == 1.0 and phases["baselines.cached"] == 0.0
    assert {"baselines.cache_read", "baselines.cache_write", "judge"} <= set(phases)


def test_profile_runs_after_the_verdict_is_printed(judged, profiled, capsys):
    rc, out, err = cli(capsys, "--profile")
    assert rc == 0, out + err
    assert profiled == ["forward"]
    assert out.index("=> PASS") < out.index("profile      PASS       profiled") < out.index("PROFILE SUMMARY")
    rc, out, err = cli(capsys, "--profile", "--json")       # one JSON document, the profile in it
    report = json.loads(out)
    assert [v["stage"] for v in report["verdicts"]][-1] == "profile" and "profile" in report["phases"]


def test_profile_is_not_run_without_a_timing_pass(judged, profiled, capsys):
    rc, out, err = cli(capsys, "--profile", "--no-timing")
    assert rc == 0 and "=> PASS" in out
    assert "no profile: only a candidate that passes with its timing is profiled" in err
    assert profiled == []
    with pytest.raises(SystemExit) as exc:
        main(["eval", "llama_rmsnorm", str(BASELINE), "--profile", "--no-profile"])
    assert exc.value.code == 2
