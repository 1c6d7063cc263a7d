"""The app says what the app can do: no command-line advice (`--force`, `--take-over`, "the same command") where
the app has a checkbox or a key instead, an export refusal that keeps its form open, an override that does not
start an evaluation nobody asked for, a damaged session that does not hide the others, a help grouped by
screen, a title that reads as a path. Headless Textual pilots on the fake evaluator; no GPU, no network."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from engine.tasks.loader import load_task
from engine.workspace import Workspace
from tests.doubles.tui import fake_backend, run_app, screen_text, type_text, wait_until
from tests.installed import start
from tests.tui.test_tui_newcomer import open_session, run_new_session

CLI_ADVICE = ("--force", "--take-over", "same command")


def messages(app) -> str:
    return "\n".join(n.message for n in app._notifications)


def test_export_refusal_keeps_the_form_open_in_the_apps_words(demo, tmp_path):
    out = tmp_path / "pkg"

    async def scenario(app, pilot):
        await open_session(app, pilot, row=2)                 # demo-g1-2 fails correctness
        await pilot.press("X")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "ExportScreen")
        form = app.screen
        form.query_one("#ex-out").value = str(out)
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: "Export refused" in screen_text(app))
        assert app.screen is form                              # still open: fix a field and try again
        text = screen_text(app)
        assert "tick 'force' to export it anyway" in "".join(text.split("\n")).replace("  ", " ") or \
            "tick 'force'" in str(form.query_one("#ex-error").render()), text
        assert not any(a in str(form.query_one("#ex-error").render()) for a in CLI_ADVICE)
        assert not (out / "pyproject.toml").exists()
        form.query_one("#ex-force").value = True
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")
        await wait_until(pilot, lambda: (out / "pyproject.toml").is_file())
    run_app(fake_backend(demo), scenario)


def test_a_busy_session_is_explained_without_cli_flags(demo, tmp_path):
    """Another process (`kbench evolve` in a shell) writes the session: an override and a run from the app are
    refused with what to do in the app, never `--take-over`."""
    writer = start(tmp_path / "home", "--workspace", str(demo), "evolve", "gelu_bias", "--proposer", "tuner",
                   "--session", "demo", "--generations", "4", fake_evaluator=True,
                   env={"KBENCH_FAKE_EVAL_HOLD_AFTER": "1"})       # its second evaluation waits: it stays the writer
    holder = demo / ".git" / "kbench-sessions" / "demo.holder.json"

    async def scenario(app, pilot):
        await wait_until(pilot, lambda: holder.exists(), timeout=60)
        s = await open_session(app, pilot, row=3)               # demo-g1-3
        await pilot.press("o")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "OverrideScreen")
        await type_text(pilot, "checked by hand")
        await pilot.press("enter")
        await wait_until(pilot, lambda: "override refused" in messages(app), timeout=20)
        await pilot.press("R")                                    # run it here: the other process has it
        await wait_until(pilot, lambda: "resume:" in messages(app), timeout=20)
        said = messages(app)
        assert "is being written by kbench evolve" in said and "try again" in said, said
        assert not any(a in said for a in CLI_ADVICE), said
        assert s.runner is None or not s.runner.running
    try:
        run_app(fake_backend(demo), scenario)
    finally:
        writer.send_signal(signal.SIGINT)
        writer.communicate(timeout=120)


def test_no_gpu_session_says_how_to_go_on_in_the_app(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_FAKE_NO_GPU", "1")

    async def scenario(app, pilot):
        s = await run_new_session(app, pilot, "nogpu")
        log = "\n".join(s.query_one("#log").lines_written)
        assert "compiled, waiting for a GPU" in log and "resume the session there (R)" in log, log
        assert "same command" not in log and "[nogpu]" not in log, log
    run_app(fake_backend(tmp_path / "ws"), scenario)


def test_an_override_does_not_start_an_evaluation(demo):
    backend = fake_backend(demo)

    async def scenario(app, pilot):
        s = await open_session(app, pilot, row=3)               # demo-g1-3: a static fail, never compiled
        await pilot.press("o")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "OverrideScreen")
        await type_text(pilot, "false positive")
        await pilot.press("enter")
        await wait_until(pilot, lambda: "override demo-g1-3 static" in "\n".join(s.query_one("#log").lines_written))
        await pilot.pause(0.5)
        log = "\n".join(s.query_one("#log").lines_written)
        assert "nothing blocks it now and it has no measurement: e evaluates it" in log, log
        assert "queued" not in log and app.backend.queued == 0
        assert not any(ev.seen for ev in backend.fake_evaluators)      # no evaluation ran
        await pilot.press("e")                                           # asked for: it runs
        await wait_until(pilot, lambda: "re-evaluated demo-g1-3" in "\n".join(s.query_one("#log").lines_written))
    run_app(backend, scenario)
    with Workspace.open(demo) as ws:
        assert ws.status("demo-g1-3").measurement is not None


def test_one_damaged_session_does_not_hide_the_others(demo):
    with Workspace.open(demo) as ws:
        ws.start_session("other", load_task("gelu_bias"))
        commit = ws.resolve("demo-g1-2").commit
    obj = demo / ".git" / "objects" / commit[:2] / commit[2:]
    obj.chmod(0o644)
    obj.write_bytes(obj.read_bytes()[:20])                       # one commit truncated on disk
    (demo / ".git" / "kbench-listing.pickle").unlink(missing_ok=True)

    async def scenario(app, pilot):
        t = app.screen.query_one("#sessions")
        await wait_until(pilot, lambda: t.row_count == 2)
        rows = {str(t.get_row_at(i)[0]): str(t.get_row_at(i)[8]) for i in range(t.row_count)}
        assert rows == {"demo": "damaged (kbench fsck)", "other": "idle"}, rows
        assert "demo: workspace damaged: candidate demo-g1-2" in screen_text(app)
    run_app(fake_backend(demo), scenario)


def test_help_is_grouped_by_screen_and_says_what_each_key_does(demo):
    async def scenario(app, pilot):
        await open_session(app, pilot)
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        t = app.screen.query_one("#help-table")
        rows = [[str(c) for c in t.get_row_at(i)] for i in range(t.row_count)]
        sections = [r[1] for r in rows if not r[0] and not r[2]]
        assert sections[0] == "Session: candidates by generation"     # the screen it was opened on, first
        assert {"Everywhere", "Home: sessions and tasks", "Candidate: code, diff, verdicts, profile, prompt"} <= \
            set(sections)
        keys = {r[2]: r for r in rows if r[2]}
        assert keys["session.mark"][1] == "mark the candidate: d then diffs against it"
        assert keys["session.log"][0] == "l" and "larger" in keys["session.log"][1]
        assert all(r[1] and r[1] != r[2] for r in keys.values())      # a line on what it does, not an id
    run_app(fake_backend(demo), scenario)


def test_the_title_reads_as_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    async def scenario(app, pilot):
        return screen_text(app).splitlines()[0]

    first = run_app(fake_backend(Path("workspace")), scenario)
    assert "kbench — ./workspace" in first and "workspace workspace" not in first, first
    assert os.path.isdir(tmp_path / "workspace")
