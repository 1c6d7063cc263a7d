"""Small things a newcomer notices on the command line: advice a command cannot follow, an exit code unlike its
siblings', times and sizes that do not add up or read badly, a syntax error called a reward hack, a mistyped
task name, an export refusal that does not say what counts. The installed `kbench`, a HOME of the test's own,
the fake evaluator where a session is needed; no GPU, no compiler."""

from __future__ import annotations

import re
import shutil
import signal
import time
from pathlib import Path

from engine.candidates import load_candidate
from engine.gpu_wait import NO_GPU, WAITING_EVENT
from engine.tasks.loader import load_task
from engine.verdict import Stage, Status, Verdict
from engine.workspace import Event, VerdictNote, Workspace
from engine.workspace.claim_holders import CLAIM_DIR
from tests.installed import kbench, start
from tests.paths import FIXTURES, REPO

EVOLVE = ("evolve", "gelu_bias", "--proposer", "tuner", "--session", "s")   # on the fake evaluator


def test_override_on_a_busy_session_is_not_told_to_take_over(tmp_path):
    """`kbench override` has no --take-over: the refusal says to wait and try again."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    # holds the session: its second evaluation waits
    writer = start(home, "--workspace", str(ws), *EVOLVE, "--generations", "3", "--population", "2",
                   env={"KBENCH_FAKE_EVAL_HOLD_AFTER": "1"}, fake_evaluator=True)
    try:
        deadline = time.monotonic() + 120
        while not (ws / ".git" / CLAIM_DIR / "s.holder.json").exists() or \
                "s-g0-1" not in kbench(home, "--workspace", str(ws), "log", "s").stdout:
            assert writer.poll() is None and time.monotonic() < deadline, writer.communicate()
            time.sleep(0.2)
        out = kbench(home, "--workspace", str(ws), "override", "s-g0-1", "timing", "fail", "--reason", "checked")
    finally:
        writer.send_signal(signal.SIGINT)
        writer.communicate(timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    err = out.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("kbench: error: session 's' is being written by kbench "
                                                         "evolve (pid "), err
    assert "--take-over" not in err and "try again" in err and "nothing was written" in err, err
    help_text = kbench(home, "override", "--help").stdout
    assert "--take-over" not in help_text             # the advice it had was for a flag it does not have


def test_reevaluate_without_a_gpu_exits_3_like_eval_and_evolve(tmp_path):
    home, ws = tmp_path / "home", tmp_path / "ws"
    assert kbench(home, "--workspace", str(ws), *EVOLVE, "--generations", "0", "--population", "1",
                  fake_evaluator=True).returncode == 0
    before = kbench(home, "--workspace", str(ws), "log", "s", "--json").stdout
    out = kbench(home, "--workspace", str(ws), "reevaluate", "s-g0-1",
                 env={"KBENCH_FAKE_NO_GPU": "1"}, fake_evaluator=True)
    assert out.returncode == 3, out.stdout + out.stderr
    assert f"s-g0-1: not re-measured: {NO_GPU}; its notes are unchanged" in out.stdout
    assert "still waiting" not in out.stdout          # it had a measurement: nothing about it is "still" waiting
    assert kbench(home, "--workspace", str(ws), "log", "s", "--json").stdout == before


def test_report_evaluation_time_is_never_less_than_its_builds(tmp_path):
    """A session compiled where no GPU is visible: 28.6 s of builds and no `evaluated` event. The report's
    "evaluation in all (build, GPU and profile)" said 0.0 s beside "build: 28.6 s"."""
    home, ws_path = tmp_path / "home", tmp_path / "ws"
    with Workspace.create(ws_path) as ws:
        ws.start_session("s", load_task("gelu_bias"), proposer="tuner")
        base = load_candidate(REPO / "tasks" / "gelu_bias" / "baselines" / "forward")
        rec = ws.commit_candidate("s", base, operator="baseline", proposer="baseline", generation=0, title="base")
        ws.record(rec.id, [VerdictNote(Verdict(Stage.STATIC, Status.PASS, "clean"), "2026-01-01T00:00:00Z"),
                           VerdictNote(Verdict(Stage.COMPILE, Status.PASS, "compiled", {"seconds": 28.6}),
                                       "2026-01-01T00:00:29Z"),
                           Event(WAITING_EVENT, {"reason": NO_GPU, "attempts": 1}, "2026-01-01T00:00:29Z")])
    out = kbench(home, "--workspace", str(ws_path), "report", "s", "--out", str(tmp_path / "r.md"))
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "r.md").read_text()
    build = float(re.search(r"^- build: ([\d.]+) s$", text, re.M).group(1))
    total = float(re.search(r"^- evaluation in all \(build, GPU and profile\): ([\d.]+) s$", text, re.M).group(1))
    assert build == 28.6 and total >= build, text


def test_show_prints_costs_in_gflop_and_gb(tmp_path):
    out = kbench(tmp_path / "home", "show", "llama_ffw")
    assert out.returncode == 0, out.stderr
    assert "e+" not in out.stdout, out.stdout
    bench = next(line for line in out.stdout.splitlines() if line.strip().startswith("bench "))
    assert bench.endswith("forward: 35.5 GFLOP, 147 MB"), bench
    assert "forward: 1.44 TFLOP, 839 MB" in out.stdout
    assert "odd-small" in out.stdout and "forward: 35 MFLOP, 2.18 MB" in out.stdout


def test_a_modelnew_syntax_error_is_not_called_a_reward_hack(tmp_path):
    bad = tmp_path / "model_new.py"
    bad.write_text("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x\n        return x\n")
    out = kbench(tmp_path / "home", "eval", str(FIXTURES / "kernelbench" / "matmul_relu.py"), str(bad))
    assert out.returncode == 1, out.stdout + out.stderr
    static = next(line for line in out.stdout.splitlines() if line.strip().startswith("static"))
    assert "FAIL" in static and "the candidate does not parse: model_new.py:3: not valid Python" in static, static
    assert "reward hack" not in out.stdout, out.stdout


def test_a_mistyped_task_name_gets_a_did_you_mean(tmp_path):
    for typo, meant in (("sofmax", "'softmax'"), ("gelubias", "'gelu_bias'")):
        out = kbench(tmp_path / "home", "show", typo)
        assert out.returncode == 2 and f"no task named '{typo}' (did you mean {meant}?)" in out.stderr, out.stderr


def test_export_from_a_folder_says_a_gpu_verdict_is_what_counts(tmp_path):
    mine = tmp_path / "mine"
    shutil.copytree(REPO / "tasks" / "gelu_bias" / "baselines" / "forward", mine)
    (mine / "kernel.cu").write_text((mine / "kernel.cu").read_text() + "\n// my change\n")
    out = kbench(tmp_path / "home", "export", "--from-dir", str(mine), "--task", "gelu_bias",
                 "--out", str(tmp_path / "pkg"))
    assert out.returncode == 2, out.stdout + out.stderr
    err = out.stderr
    assert "no GPU verdict is recorded for these exact sources: a `kbench eval` that checked their correctness " \
           "on a GPU is what counts" in err, err
    assert "no `kbench eval` of these exact sources was recorded" not in err
    assert not (tmp_path / "pkg").exists()
