"""Resume after kill -9: the loop runs in a child process that is killed mid-session; starting it again
continues from the workspace alone, loses no candidate and re-evaluates none that had finished."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.doubles.evaluator import FakeEvaluator
from engine.evolve.loop import Budgets, EvolutionSession
from engine.evolve.resume import load_state
from engine.proposers.tuner import TunerProposer
from engine.tasks.loader import load_task
from engine.workspace import Workspace
from tests.paths import REPO

CHILD = textwrap.dedent("""
    import sys
    from tests.doubles.evaluator import FakeEvaluator
    from engine.evolve.loop import Budgets, EvolutionSession
    from engine.proposers.tuner import TunerProposer
    from engine.tasks.loader import load_task
    from engine.workspace import Workspace

    ws = Workspace.open(sys.argv[1])
    task = load_task("gelu_bias")
    log = open(sys.argv[2], "a")

    class Logged(FakeEvaluator):
        def submit(self, cand, on_stage=None):
            log.write(cand.source_hash + "\\n"); log.flush()
            return super().submit(cand, on_stage)

    EvolutionSession(ws, "kill", task, TunerProposer(), Logged(task, delay_s=0.1),
                     budgets=Budgets(generations=4, population=5)).run()
""")

TOTAL = 1 + 4 * 5


def finished(ws, session):
    out = set()
    for v in ws.candidates(session, strict=False):
        if any(e.event == "evaluated" for e in v.status.events):
            out.add(v.record.source_hash)
    return out


def test_kill_minus_nine_then_resume(tmp_path):
    ws_path = tmp_path / "ws"
    Workspace.create(ws_path).close()
    log = tmp_path / "submitted.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO)]
                                                          + [os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(ws_path), str(log)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    ws = Workspace.open(ws_path)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if "kill" in {s.name for s in ws.sessions()} and len(finished(ws, "kill")) >= 7:
                break
            if child.poll() is not None:
                pytest.fail("the child finished before it could be killed: " + child.stdout.read().decode()[-2000:])
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(10)
    assert child.returncode == -signal.SIGKILL
    done_before = finished(ws, "kill")
    committed_before = {v.record.source_hash for v in ws.candidates("kill")}
    assert 7 <= len(done_before) < TOTAL
    state = load_state(ws, "kill")
    assert len(state.requeue) == len(committed_before) - len(done_before)

    task = load_task("gelu_bias")
    fake = FakeEvaluator(task)
    s = EvolutionSession(ws, "kill", task, TunerProposer(), fake, budgets=Budgets(generations=4, population=5))
    events = []
    s.subscribe(events.append)
    r = s.run()
    fake.close()
    assert r.completed, r.reason
    assert events[0].resumed and events[0].finished == len(done_before)
    # nothing finished was evaluated again; everything committed but unfinished was, exactly once
    assert not set(fake.seen) & done_before
    assert len(fake.seen) == len(set(fake.seen))
    assert (committed_before - done_before) <= set(fake.seen)
    views = ws.candidates("kill")
    assert len(views) == TOTAL                                    # nothing lost, nothing duplicated
    assert len({v.record.source_hash for v in views}) == TOTAL
    assert all(any(e.event == "evaluated" for e in v.status.events) for v in views)
    assert all(len([e for e in v.status.events if e.event == "evaluated"]) == 1 for v in views)
    assert ws.session("kill").best == ws.best("kill").id
    ws.close()


def test_a_candidate_committed_just_before_a_kill_is_checked_before_the_gpu(tmp_path):
    from engine.candidates import load_candidate
    from engine.verdict import Status, Verdict

    def reject_marker(task, direction, cand):
        bad = "REJECT_ME" in cand.files["kernel.cu"]
        return Verdict("static", Status.FAIL if bad else Status.PASS, "marker" if bad else "clean")

    task = load_task("gelu_bias")
    ws = Workspace.create(tmp_path / "ws")
    fake = FakeEvaluator(task)
    EvolutionSession(ws, "pre", task, TunerProposer(), fake, budgets=Budgets(generations=0),
                     checks=[reject_marker]).run()
    base = load_candidate(task.baseline_dir("forward"))
    # what a kill right after commit_candidate leaves: commits without any note
    bad = ws.commit_candidate("pre", type(base)("native", {**base.files, "kernel.cu": base.files["kernel.cu"]
                                                           + "// REJECT_ME\n"}, "bad"),
                              parents=[ws.candidates("pre")[0].id], operator="tune", proposer="tuner", generation=1)
    good = ws.commit_candidate("pre", type(base)("native", {**base.files, "kernel.cu": base.files["kernel.cu"]
                                                            + "// fine\n"}, "good"),
                               parents=[ws.candidates("pre")[0].id], operator="tune", proposer="tuner", generation=1)
    fake2 = FakeEvaluator(task)
    r = EvolutionSession(ws, "pre", task, TunerProposer(), fake2, budgets=Budgets(generations=1, population=2),
                         checks=[reject_marker]).run()
    assert r.completed
    assert fake2.seen == [good.source_hash]
    assert ws.status(bad.id).status_of("static") == Status.FAIL and ws.status(bad.id).measurement is None
    assert ws.status(good.id).status_of("static") == Status.PASS and ws.status(good.id).measurement is not None
    fake.close(), fake2.close()
    ws.close()
