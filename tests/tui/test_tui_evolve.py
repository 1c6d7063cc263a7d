"""TUI new-session form and the live evolution controls (pause / resume / step / stop), on the engine's
EvolutionSession with the tuner proposer and a fake evaluator. No GPU, no network."""

from __future__ import annotations

from engine.workspace import Workspace
from tests.doubles.tui import fake_backend, run_app, screen_text, type_text, wait_until


def kinds(screen):
    return [line.split("] ", 1)[-1].split(" ")[0] for line in screen.query_one("#log").lines_written]


def test_new_session_offers_anthropic_only_with_a_key(tmp_path):
    async def scenario(app, pilot):
        await pilot.press("n")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "NewSessionScreen")
        opts = [v for _, v in app.screen.query_one("#ns-proposer")._options if v is not None]
        return opts, screen_text(app)

    opts, text = run_app(fake_backend(tmp_path / "a", env={}), scenario)
    assert "anthropic" not in opts and "tuner" in opts
    assert "anthropic: No ANTHROPIC_API_KEY is set" in text
    opts, text = run_app(fake_backend(tmp_path / "b", env={"ANTHROPIC_API_KEY": "sk-test"}), scenario)
    assert opts[0] == "anthropic" and "anthropic: No ANTHROPIC_API_KEY" not in text


def test_new_session_rejects_bad_numbers(tmp_path):
    async def scenario(app, pilot):
        await pilot.press("n")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "NewSessionScreen")
        app.screen.query_one("#ns-population").value = "0"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert "population >= 1" in screen_text(app)
        assert not app.backend.ws.sessions()
        await pilot.press("escape")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "HomeScreen")
    run_app(fake_backend(tmp_path / "ws"), scenario)


def test_start_step_pause_resume_stop(tmp_path):
    backend = fake_backend(tmp_path / "ws", delay_s=0.05)

    async def scenario(app, pilot):
        t = app.screen.query_one("#tasks")
        t.focus()
        while t.get_row_at(t.cursor_row)[0] != "gelu_bias":
            await pilot.press("j")
        await pilot.press("enter")                           # enter on a task: the form, task preselected
        await wait_until(pilot, lambda: type(app.screen).__name__ == "NewSessionScreen")
        f = app.screen
        assert f.query_one("#ns-task").value == "gelu_bias"
        f.query_one("#ns-generations").value = "2"
        f.query_one("#ns-population").value = "2"
        f.query_one("#ns-name").focus()
        await type_text(pilot, "gb")
        f.query_one("#ns-paused").value = True
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")
        s = app.screen
        r = app.backend.runner("gb")
        await wait_until(pilot, lambda: "Paused" in s.last_event or "paused" in "\n".join(s.query_one("#log").lines_written))
        assert r.running and r.paused and "[paused]" in str(s.query_one("#progress").text)
        assert app.backend.ws.session("gb").candidates == 0
        await pilot.press("s")                               # one step: the baseline, evaluated, paused again
        await wait_until(pilot, lambda: s.counts["evaluated"] == 1)
        await pilot.pause(0.3)
        assert app.backend.ws.session("gb").candidates == 1 and r.paused
        await pilot.press("s")
        await wait_until(pilot, lambda: s.counts["evaluated"] == 2)
        assert app.backend.ws.session("gb").candidates == 2
        await pilot.press("space")                           # resume: runs to the end of its budgets
        await wait_until(pilot, lambda: not r.running, timeout=30)
        await wait_until(pilot, lambda: s.loaded and len(s.data.views) == 5)
        assert "Stopped" in s.last_event or "stopped" in "\n".join(s.query_one("#log").lines_written)
        assert [g.generation for g in s.data.stats] == [0, 1, 2]
        assert "[idle]" in str(s.query_one("#progress").text)
        await pilot.press("escape")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "HomeScreen")
        await wait_until(pilot, lambda: app.screen.query_one("#sessions").row_count == 1)
        await pilot.pause()
        row = app.screen.query_one("#sessions").get_row_at(0)
        assert row[0] == "gb" and row[3] == "tuner" and row[4] == "5" and row[5] == "2"
    run_app(backend, scenario)
    with Workspace.open(tmp_path / "ws") as ws:
        views = ws.candidates("gb")
        assert len(views) == 5 and all(v.status.measurement is not None for v in views)
        assert ws.session("gb").best is not None


def test_stop_while_running_and_run_again(tmp_path):
    backend = fake_backend(tmp_path / "ws", delay_s=0.2)

    async def scenario(app, pilot):
        await pilot.press("n")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "NewSessionScreen")
        app.screen.query_one("#ns-generations").value = "3"
        app.screen.query_one("#ns-population").value = "3"
        task = app.screen.query_one("#ns-task").value
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")
        s = app.screen
        name = s.session
        r = app.backend.runner(name)
        await wait_until(pilot, lambda: s.counts["evaluated"] >= 1)
        await pilot.press("x")
        await wait_until(pilot, lambda: not r.running, timeout=20)
        assert r.result is not None and not r.result.completed
        await pilot.press("x")                               # not running: says so
        await pilot.pause()
        assert any("not running" in n.message for n in app._notifications)
        n_before = app.backend.ws.session(name).candidates
        await pilot.press("R")                               # resume from the workspace
        await wait_until(pilot, lambda: app.backend.runner(name) is not r and app.backend.runner(name) is not None)
        r2 = app.backend.runner(name)
        await wait_until(pilot, lambda: not r2.running, timeout=40)
        assert r2.result.completed
        assert app.backend.ws.session(name).candidates > n_before
        return task
    run_app(backend, scenario)


def test_hand_edit_and_override_during_a_running_session_reach_its_loop(tmp_path):
    """With the session's loop running (paused), `E` commits a human candidate that the loop adopts and
    evaluates with its own evaluator (no separate re-evaluation), and an override that unblocks a candidate
    sends it back through the loop."""
    import subprocess
    from pathlib import Path

    def fake_editor(cmd, cwd=None, **kw):
        kernel = Path(cmd[1])
        kernel.write_text(kernel.read_text() + "\n// FAKE_SPEEDUP=2.50 hand tuned\n")
        return subprocess.CompletedProcess(cmd, 0)

    backend = fake_backend(tmp_path / "ws", delay_s=0.05, env={"EDITOR": "ed"}, editor_run=fake_editor)

    async def scenario(app, pilot):
        r = app.backend.start_evolution(task="gelu_bias", direction="forward", proposer="tuner", generations=1,
                                        population=1, session="live", paused=True)
        await wait_until(pilot, lambda: r.paused)
        r.step(1)                                            # the baseline
        await wait_until(pilot, lambda: r.evaluated == 1)
        await pilot.press("r")
        await wait_until(pilot, lambda: app.screen.query_one("#sessions").row_count == 1)
        app.screen.query_one("#sessions").focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen" and app.screen.loaded)
        s = app.screen
        await pilot.press("E")
        await wait_until(pilot, lambda: "live-g1-1" in (s.data.index if s.data else {}))
        await wait_until(pilot, lambda: app.backend.ws.status("live-g1-1").measurement is not None)
        log = "\n".join(s.query_one("#log").lines_written)
        assert "joined the running session" in log and "re-evaluate live-g1-1" not in log, log
        assert r.population.get("live-g1-1") is not None and r.population.best().id == "live-g1-1"
        assert not app.backend.reevaluations.evaluators                   # the app evaluated nothing itself
        entry, step = app.backend.override("live-g1-1", "timing", "suspicious", "faster than I believe")
        assert step == "session"                             # the running loop re-reads it
        await wait_until(pilot, lambda: not r.population.get("live-g1-1").eligible)
        assert r.population.best().id == "live-g0-1"
        r.stop()
        await wait_until(pilot, lambda: not r.running, timeout=20)
    run_app(backend, scenario)
    with Workspace.open(tmp_path / "ws") as ws:
        assert ws.resolve("live-g1-1").proposer == "human"
        assert [e.event for e in ws.status("live-g1-1").events].count("evaluated") == 1
