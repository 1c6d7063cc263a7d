"""Evolution on a machine without a GPU: the tuner queues one generation (proposed and compiled from the
unmeasured baseline), stops saying so, and the same command on a GPU machine measures them and goes on.
"Waiting for a GPU" is one state with one name in the events, `kbench log`, `show-candidate`, `report` and the
app's backend. Also `--no-baseline --population 1`. CPU only: the fake evaluator plays both machines."""

from __future__ import annotations

import pytest

from engine.cli import main
from engine.evolve.loop import Budgets, EvolutionSession
from engine.gpu_wait import WAITING_EVENT, WAITING_FOR_GPU, waiting_for_gpu
from engine.proposers.tuner import TunerProposer
from engine.tasks.loader import builtin_tasks_dir
from engine.workspace import Workspace
from tests.doubles.evaluator import FakeEvaluator
from tests.doubles.kbench import use_fake_evaluator

SESSION = "gelu_bias-fwd-tuner"


def run(ws, task, evaluator, generations=3, population=3):
    events = []
    s = EvolutionSession(ws, SESSION, task, TunerProposer(), evaluator,
                         budgets=Budgets(generations=generations, population=population))
    s.subscribe(events.append)
    stopped = s.run()
    evaluator.close()
    return stopped, events


def test_tuner_without_a_gpu_queues_one_generation_then_a_gpu_run_goes_on(ws, task):
    no_gpu = FakeEvaluator(task, no_gpu=True)
    stopped, events = run(ws, task, no_gpu)
    views = ws.candidates(SESSION)
    base = views[0]
    gen1 = [v for v in views if v.generation == 1]
    assert base.record.operator == "baseline" and len(gen1) == 3
    assert all(tuple(v.record.parents) == (base.id,) and v.record.operator == "tune" for v in gen1)
    assert len(views) == 4                                     # one generation ahead, no chain of guesses
    assert all(waiting_for_gpu(v.status) for v in views)
    assert all([e.event for e in v.status.events] == [WAITING_EVENT] for v in views)
    assert all(v.status.measurement is None and "correctness" not in v.status.stages for v in views)
    assert not stopped.completed and stopped.waiting_for_gpu == 4 and stopped.evaluated == 0
    assert stopped.reason.startswith(f"{WAITING_FOR_GPU}: 4 candidate(s) compiled and queued, up to generation 1")
    lines = [e.line() for e in events]
    assert any("evaluated gelu_bias-fwd-tuner-g1-1: compiled, waiting for a GPU" in x for x in lines)
    assert any("generation 1 is proposed from them and compiled, then queued for a GPU" in x for x in lines)
    assert not any("infrastructure" in x for x in lines)      # nothing broke: it waits

    # the same command again without a GPU: nothing new is proposed, the queue stays as it is
    stopped2, _ = run(ws, task, FakeEvaluator(task, no_gpu=True))
    assert len(ws.candidates(SESSION)) == 4 and stopped2.waiting_for_gpu == 4

    # on a GPU machine: the queued candidates are measured (not proposed again) and evolution goes on
    gpu = FakeEvaluator(task)
    stopped3, events3 = run(ws, task, gpu)
    assert stopped3.completed and stopped3.waiting_for_gpu == 0
    views = ws.candidates(SESSION)
    assert len(views) == 10 and len({v.record.source_hash for v in views}) == 10
    assert all(v.status.measurement is not None and not waiting_for_gpu(v.status) for v in views)
    queued = {v.record.source_hash for v in gen1}
    assert queued <= set(gpu.seen)                            # measured there, once each
    assert len(gpu.seen) == len(set(gpu.seen)) == 10


def test_no_gpu_is_not_counted_as_the_executor_breaking(ws, task):
    """Five infrastructure failures in a row stop a session; five candidates waiting for a GPU do not."""
    stopped, _ = run(ws, task, FakeEvaluator(task, no_gpu=True), generations=2, population=6)
    assert "executor lost" not in stopped.reason and stopped.reason.startswith(WAITING_FOR_GPU)
    n = len(ws.candidates(SESSION))
    assert n >= 6 and stopped.waiting_for_gpu == n           # more than five in a row, and still queued


def test_cli_without_a_gpu_exits_3_and_says_what_waits(tmp_path, capsys, monkeypatch):
    use_fake_evaluator(monkeypatch.setattr)
    monkeypatch.setenv("KBENCH_FAKE_NO_GPU", "1")
    ws = str(tmp_path / "ws")
    rc = main(["--workspace", ws, "evolve", "gelu_bias", "--proposer", "tuner", "--generations", "2",
               "--population", "2"])
    out = capsys.readouterr().out
    assert rc == 3, out
    assert "/hour" not in out and "GPU busy" not in out       # no throughput figure: nothing was measured
    assert "3 candidate(s) compiled and waiting for a GPU: run the same command on a machine with a GPU" in out
    # kbench log: the same name in the legend, `w` where correctness and timing wait
    assert main(["--workspace", ws, "log", SESSION]) == 0
    log = capsys.readouterr().out
    assert "w waiting for a GPU" in log
    row = next(line for line in log.splitlines() if f"{SESSION}-g1-1" in line)
    assert row.split()[3:10] == ["+", ".", "+", "w", "w", ".", "."]
    assert main(["--workspace", ws, "show-candidate", f"{SESSION}-g1-1"]) == 0
    assert "state      waiting for a GPU: compiled where no GPU was visible" in capsys.readouterr().out
    # the report: the waiting candidates, the baseline's stages, and no empty validity table
    assert main(["--workspace", ws, "report", SESSION]) == 0
    rep = capsys.readouterr().out
    assert "3 candidate(s) compiled and waiting for a GPU" in rep
    assert "| compile | 2 | 2 | 100% | pass |" in rep
    monkeypatch.delenv("KBENCH_FAKE_NO_GPU")
    rc = main(["--workspace", ws, "evolve", "gelu_bias", "--proposer", "tuner", "--generations", "2",
               "--population", "2"])
    out = capsys.readouterr().out
    assert rc == 0 and "session resumed at gen 1: 0 evaluated, 3 re-queued" in out
    assert "waiting for a GPU" not in out.split("stopped:")[1]


def test_throughput_only_for_what_was_measured():
    from engine.cli.evolve_summary import exit_code, summary_lines
    from engine.evolve.events import Stopped

    # the local executor's statistics on a machine without a GPU: every evaluation unmeasured
    none = {"completed": 4, "unmeasured": 4, "candidates_per_hour": 240.0, "gpu_busy_fraction": 0.9}
    waiting = Stopped("s", reason="waiting for a GPU: ...", waiting_for_gpu=4)
    lines = summary_lines(none, waiting, "s")
    assert not any("/hour" in x or "GPU busy" in x for x in lines)
    assert lines[0].startswith("4 candidate(s) compiled and waiting for a GPU")
    assert exit_code(waiting, interrupted=False) == 3 and exit_code(waiting, interrupted=True) == 130
    # half measured: the rate is of measured candidates only
    half = {"completed": 4, "unmeasured": 2, "candidates_per_hour": 240.0, "gpu_busy_fraction": 0.5}
    done = Stopped("s", reason="all 3 generation(s) done", completed=True, best="s-g1-1", best_speedup=1.5)
    assert summary_lines(half, done, "s")[0] == "measured 2 candidate(s): 120/hour, GPU busy 50%"
    assert exit_code(done, interrupted=False) == 0


def test_report_counts_build_time_from_the_compile_verdicts(ws, task):
    """An evaluation without a GPU writes no `evaluated` event; its compile verdict still carries the build
    time, which the report must show instead of 0.0 s."""
    from engine.evolve.outcome import EvalOutcome
    from engine.gpu_wait import NO_GPU
    from engine.profile.session_report import build_report, to_markdown
    from engine.verdict import Status, Verdict

    class SlowBuild(FakeEvaluator):
        def submit(self, candidate, on_stage=None):
            from concurrent.futures import Future
            f = Future()
            f.set_result(EvalOutcome([Verdict("compile", Status.PASS, "compiled", {"seconds": 61.5})],
                                     infra_error=NO_GPU))
            return f

    run(ws, task, SlowBuild(task), generations=0, population=1)
    rep = build_report(ws, SESSION)
    assert rep.seconds["build"] == pytest.approx(61.5) and rep.waiting_for_gpu == 1
    md = to_markdown(rep)
    assert "- build: 61.5 s" in md
    assert "| compile | 0 | 0 | - | pass |" in md                  # the baseline's row, not an empty table


def test_no_baseline_with_a_population_of_one_commits_no_baseline(ws, task, tmp_path, capsys, monkeypatch):
    """--no-baseline --population 1: generation 0 is one proposal, never the task's baseline."""
    use_fake_evaluator(monkeypatch.setattr)
    rec = tmp_path / "rec"
    (rec / "a").mkdir(parents=True)
    base = builtin_tasks_dir() / "gelu_bias" / "baselines" / "forward"
    for name in ("kernel.cu", "binding.cpp"):
        text = (base / name).read_text()
        (rec / "a" / name).write_text(text + ("\n// replayed\n" if name == "kernel.cu" else ""))
    wsp = str(tmp_path / "ws2")
    rc = main(["--workspace", wsp, "evolve", "gelu_bias", "--proposer", "replay", "--replay-from", str(rec),
               "--no-baseline", "--population", "1", "--generations", "0"])
    out = capsys.readouterr().out
    assert rc == 0, out
    with Workspace.open(wsp) as w:
        (only,) = w.candidates("gelu_bias-fwd-replay")
        assert only.record.operator != "baseline" and "replayed" in w.files(only.id).files["kernel.cu"]
