"""The judge `kbench eval` starts as it begins (engine/pipeline/early_judge.py, engine/cli/eval_start.py): started
only where a GPU may be visible and the timing helper is built, handed only a request of its own helper, let go
(never handed a request) when it died or did not come up, and the evaluation falls back to a cold judge. The
processes are stand-ins here; tests/acceptance/test_eval_early_judge.py starts the real ones."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.cli import eval_start
from engine.pipeline import early_judge as ej
from engine.pipeline import evaluate as ev
from engine.pipeline.protocol.result import STANDBY_STATE
from engine.pipeline.protocol.types import TimerSpec
from engine.procs import ChildOutcome, process_age
from tests.paths import REPO
from tests.pipeline.timing_fakes import judge_answer

TIMER = TimerSpec("/cache/t.so", "kb_t")
IMPORTED = time.monotonic()


class FakeChild:
    """A standby judge stand-in: its folder, whether it lives, what it answers."""

    def __init__(self, folder: Path, alive: bool = True, state: dict | None = None, answer=None):
        self.tmpdir = folder
        self.proc = SimpleNamespace(stdin=None, wait=lambda timeout: 0)
        self._alive = alive
        self.discarded = False
        self.requests: list[dict] = []
        self.answer = answer
        if state is not None:
            (folder / STANDBY_STATE).write_text(json.dumps(state))

    def alive(self) -> bool:
        return self._alive and not self.discarded

    def state(self, name: str):
        path = self.tmpdir / name
        return json.loads(path.read_text()) if path.is_file() else None

    def stop(self) -> None:
        self.discarded = True

    def let_go(self, grace_s: float) -> None:
        self.graced = grace_s
        self.stop()

    def run(self, request: dict, timeout_s: float) -> ChildOutcome:
        self.requests.append(request)
        return self.answer(request)


def early_with(child: FakeChild) -> ej.EarlyJudge:
    return ej.EarlyJudge(child, TIMER, origin=0.0, spawned_at=0.5)  # type: ignore[arg-type]


def test_the_process_started_before_now():
    # A fresh interpreter is seconds old; this one (a long test session) is at least as old as its import of us.
    fresh = subprocess.run([sys.executable, "-c", "from engine.procs import process_age; print(process_age())"],
                           cwd=REPO, capture_output=True, text=True, check=True)
    assert 0.0 < float(fresh.stdout) < 60
    assert process_age() >= time.monotonic() - IMPORTED > 0.0
    assert ej.process_start() < time.monotonic()


@pytest.mark.parametrize("state", [None, {"ok": True}])
def test_a_judge_warming_up_or_up_is_handed_the_request(tmp_path, state):
    child = FakeChild(tmp_path, state=state)
    early = early_with(child)
    assert early.take(TIMER) is child and early.handed
    assert early.phases["start.judge_requested"] > 0
    early.close()
    assert not child.discarded                      # handed over: not closing's to end
    early.judged({"standby_up": 2.0})
    assert early.phases["start.judge_ready"] == 2.5   # spawned at 0.5 s, up 2 s later


@pytest.mark.parametrize("how", ["another timer", "died", "did not come up"])
def test_a_judge_that_cannot_serve_is_let_go(tmp_path, how):
    child = FakeChild(tmp_path, alive=how != "died", state={"ok": False, "why": "runner jail"}
                      if how == "did not come up" else None)
    early = early_with(child)
    timer = TimerSpec("/cache/other.so", "kb_o") if how == "another timer" else TIMER
    assert early.take(timer) is None and child.discarded and not early.handed
    assert early.why_not


@pytest.mark.parametrize("up", [False, True])
def test_close_lets_a_judge_that_was_never_asked_go(tmp_path, up):
    child = FakeChild(tmp_path, state={"ok": True} if up else None)
    early = early_with(child)
    early.close()
    assert child.discarded and early.take(TIMER) is None
    assert child.graced == (ej.CLOSE_GRACE_S if up else 0.0)    # a grace only for a judge that is up


def test_none_is_started_without_a_gpu_or_without_the_timing_helper(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(ej, "StandbyChild", lambda *a, **k: started.append(a) or FakeChild(tmp_path))
    monkeypatch.setattr(ej, "no_gpu_visible", lambda gpu=None: "CUDA_VISIBLE_DEVICES is empty")
    got = ej.start_early(None, tmp_path)
    assert got.child is None and "no GPU" in got.why_not
    monkeypatch.setattr(ej, "no_gpu_visible", lambda gpu=None: None)
    monkeypatch.setattr(ej, "cached_toolchain", lambda root: SimpleNamespace(key=lambda: "k"))
    monkeypatch.setattr(ej, "entry_dir", lambda *a: tmp_path / "nothing")
    got = ej.start_early(None, tmp_path)
    assert got.child is None and "not built" in got.why_not and not started
    built = SimpleNamespace(ok=True, so_path=Path("/cache/t.so"), module_name="kb_t")
    monkeypatch.setattr(ej, "_read_entry", lambda entry: built)
    got = ej.start_early(1, tmp_path)
    assert got.child is not None and got.timer == TIMER and got.phases["start.judge_spawned"] >= 0
    assert started == [(ej.JUDGE, ["/cache/t.so", "kb_t"])]


@pytest.mark.parametrize("argv, gpu", [
    (["eval", "llama_rmsnorm", "cand", "--gpu", "3"], 3),
    (["--workspace", "ws", "eval", "t", "c", "--json"], None),
    (["eval", "t", "c", "--time-config", "all", "--trials", "1"], None),
])
def test_begin_starts_a_judge_for_an_eval_command_line(monkeypatch, argv, gpu):
    asked = []
    monkeypatch.setattr(eval_start, "start_early", lambda g, root, origin: asked.append(g) or "judge")
    assert eval_start.begin(argv) == "judge" and asked == [gpu]


@pytest.mark.parametrize("argv", [["tasks"], ["eval"], ["eval", "t", "c", "--help"], ["eval", "t", "c", "--gpu", "x"],
                                  ["show", "eval"], ["eval", "t", "c", "--trials"]])
def test_begin_starts_nothing_for_another_command_or_a_bad_one(monkeypatch, argv):
    monkeypatch.setattr(eval_start, "start_early", lambda *a: pytest.fail(f"started for {argv}"))
    assert eval_start.begin(argv) is None


def test_begin_never_fails_the_command(monkeypatch):
    monkeypatch.setattr(eval_start, "start_early", lambda *a: (_ for _ in ()).throw(RuntimeError("no nvcc")))
    assert eval_start.begin(["eval", "t", "c"]) is None


def test_evaluate_hands_the_request_to_the_early_judge_and_falls_back_to_a_cold_one(judged, tmp_path, monkeypatch):
    from engine.candidates import load_candidate
    from engine.tasks.loader import load_task

    task = load_task("llama_rmsnorm")
    cand = load_candidate(REPO / "tasks" / "llama_rmsnorm" / "baselines" / "forward")
    timer = TimerSpec(str(tmp_path / "t.so"), "t")       # what the fake build_timer gives
    ok = lambda req: ChildOutcome(judge_answer(req), 0, False, 1.0, "")                          # noqa: E731
    child = FakeChild(tmp_path, state={"ok": True}, answer=ok)
    early = ej.EarlyJudge(child, timer, origin=0.0, spawned_at=0.1)  # type: ignore[arg-type]
    report = ev.evaluate(task, cand, "forward", ev.EvalOptions(), early=early)
    assert len(child.requests) == 1 and judged == [] and report.passed      # the early judge served, no cold one
    assert report.phases["judge.early"] == 1.0
    assert report.phases["start.build_done"] <= report.phases["start.judge_requested"]
    died = lambda req: ChildOutcome({}, -9, False, 0.5, "killed")                                 # noqa: E731
    child = FakeChild(tmp_path, state={"ok": True}, answer=died)
    early = ej.EarlyJudge(child, timer, origin=0.0, spawned_at=0.1)  # type: ignore[arg-type]
    said: list[str] = []
    report = ev.evaluate(task, cand, "forward", ev.EvalOptions(), progress=said.append, early=early)
    assert len(child.requests) == 1 and len(judged) == 1 and report.passed   # died before any config: cold
    assert not any("once more" in m or "re-measuring" in m for m in said), said   # at once, not as a retry


@pytest.mark.parametrize("grace", [5.0, 0.0])
def test_a_standby_child_let_go_with_a_grace_gets_eof_and_exits_by_itself(tmp_path, grace):
    from engine.procs import StandbyChild
    out = tmp_path / "out"
    child = StandbyChild("tests.doubles.standby_eof", [str(out)])
    deadline = time.monotonic() + 30
    while not out.is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert out.read_text() == "up"
    child.let_go(grace)
    assert not child.alive()
    if grace:
        assert out.read_text() == "eof"      # it saw EOF and ended by itself, within its grace
        assert child.proc.returncode == 0
