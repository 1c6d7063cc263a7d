"""`kbench eval` as a user runs it on a machine without a GPU: the flags for the baselines' disk cache and the
profile are taken, the candidate is compiled and no judge starts (so no cache is read or written, and nothing is
profiled), and a cache file someone broke is no trouble, never a traceback. On a GPU,
tests/cli/test_gpu_eval_cache.py runs the same CLI against the cache it fills, and tests/pipeline/test_baseline_cache.py
covers a broken or read-only cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import HAS_GPU
from tests.paths import REPO

pytestmark = [pytest.mark.slow,   # builds the candidate once (nvcc), into the suite's shared cache
              pytest.mark.skipif(HAS_GPU, reason="with a GPU the candidate is measured: tests/cli/test_gpu_eval_cache.py")]

CANDIDATE = str(REPO / "tasks" / "gelu_bias" / "baselines" / "forward")


def test_eval_takes_the_cache_and_profile_flags_and_survives_a_broken_cache_file(user):
    helped = user.run("eval", "--help")
    assert "--fresh-baselines" in helped.stdout and "--profile" in helped.stdout, helped.stdout

    first = user.run("eval", "gelu_bias", CANDIDATE, "--json", timeout=900)
    assert first.returncode == 3, first.stdout[-2000:] + first.stderr[-3000:]      # compiled, not checked: no GPU
    report = json.loads(first.stdout)
    corr = next(v for v in report["verdicts"] if v["stage"] == "correctness")
    assert corr["status"] == "skipped" and "no_gpu" in corr["data"], corr              # no judge was started
    assert not report.get("baselines"), report.get("baselines")      # no judge: the cache was not consulted
    assert not any(v["stage"] == "profile" for v in report["verdicts"])
    assert report["phases"]["build.cache_hit"] in (0.0, 1.0)

    folder = Path(user.env["XDG_CACHE_HOME"]) / "kbench" / "baselines"   # under the user's cache root
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "broken.json").write_text("{ not what kbench wrote")
    again = user.run("eval", "gelu_bias", CANDIDATE, "--json", timeout=300)
    assert again.returncode == 3 and "Traceback" not in again.stderr, again.stderr[-3000:]

    text = user.run("eval", "gelu_bias", CANDIDATE, "--fresh-baselines", "--profile", timeout=300)
    assert text.returncode == 3 and "Traceback" not in text.stderr, text.stderr[-3000:]
    assert "no profile: only a candidate that passes with its timing is profiled" in text.stderr
    assert "build " in text.stdout and "(cache hit)" in text.stdout and "judge " not in text.stdout, text.stdout
    assert "no judge started" in text.stderr, text.stderr[-2000:]

    both = user.run("eval", "gelu_bias", CANDIDATE, "--profile", "--no-profile")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
