"""The app as a newcomer meets it (headless Textual pilots; no GPU, no network): where the focus is, what
the forms offer and start with, the help list to its end, the override screen's words, the user's own task
folders ($KBENCH_TASKS), a failed start that leaves nothing, and "waiting for a GPU" on the home screen."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from kbench_tui import keymap
from tests.doubles.tui import fake_backend, run_app, screen_text, type_text, wait_until
from tests.paths import FIXTURES, REPO

HEAVY = "┏"        # the focused field's border (styles.tcss): visible without colour


async def open_form(app, pilot):
    await pilot.press("n")
    await wait_until(pilot, lambda: type(app.screen).__name__ == "NewSessionScreen")
    await pilot.pause(0.05)
    return app.screen


def options(select) -> list[str]:
    return [v for _, v in select._options if v is not None]


def test_no_cuda_runtime_line_from_a_build_worker():
    """Importing torch's cpp_extension without a GPU logged "No CUDA runtime is found" to stderr; from a
    build worker process that line was drawn over the app. kbench's toolchain detection silences it."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO), "CUDA_HOME": "/usr/local/cuda"}
    code = "from engine.harness.toolchain import detect\ntry:\n    detect()\nexcept Exception:\n    pass\n"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "No CUDA runtime" not in out.stderr, out.stderr


def test_new_session_form_opens_focused_and_shows_where_the_focus_is(demo):
    async def scenario(app, pilot):
        f = await open_form(app, pilot)
        assert app.focused is f.query_one("#ns-task")             # a field, not the scroll container
        text = screen_text(app)
        assert text.count(HEAVY) == 1
        first = text.split("\n").index(next(line for line in text.split("\n") if HEAVY in line))
        assert "task" in text.split("\n")[first - 1]               # the heavy border is under the "task" label
        await pilot.press("tab")
        assert app.focused is f.query_one("#ns-direction")
        text2 = screen_text(app)
        assert text2.count(HEAVY) == 1 and text2 != text          # it moved with the focus
    run_app(fake_backend(demo), scenario)


def test_start_paused_is_off_and_looks_off(demo):
    async def scenario(app, pilot):
        f = await open_form(app, pilot)
        box = f.query_one("#ns-paused")
        assert box.value is False
        assert "▐ ▌ start paused" in screen_text(app)              # an empty box, not an X in another colour
        box.focus()
        await pilot.press("space")
        assert box.value is True and "▐X▌ start paused" in screen_text(app)
    run_app(fake_backend(demo), scenario)


def test_proposers_without_an_api_key(demo, tmp_path):
    async def scenario(app, pilot):
        f = await open_form(app, pilot)
        return options(f.query_one("#ns-proposer")), screen_text(app)

    opts, text = run_app(fake_backend(demo, env={}), scenario)
    assert opts == ["tuner", "replay"]                             # human needs an editor: said why
    assert "human: Set $VISUAL or $EDITOR" in text and "anthropic: No ANTHROPIC_API_KEY" in text
    opts, text = run_app(fake_backend(demo, env={"EDITOR": "true"}), scenario)
    assert opts == ["tuner", "replay", "human"]


def test_help_list_scrolls_to_its_end(demo):
    last_id = keymap.all_specs()[-1].id

    async def scenario(app, pilot):
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        assert last_id not in screen_text(app)                     # more bindings than the box shows
        await pilot.press("G")
        await pilot.pause(0.1)
        assert last_id in screen_text(app)
        await pilot.press("g")
        await pilot.pause(0.1)
        assert last_id not in screen_text(app) and "home.open" in screen_text(app)   # home's keys lead
        await pilot.press("end")                                   # end too (the table would take it)
        await pilot.pause(0.1)
        assert last_id in screen_text(app)
        for _ in range(3):
            await pilot.press("k")
        t = app.screen.query_one("#help-table")
        assert t.cursor_row == t.row_count - 4
    run_app(fake_backend(demo), scenario, size=(100, 30))


def test_override_warning_clears_and_no_none_in_the_override_screen(demo):
    async def scenario(app, pilot):
        await pilot.press("enter")
        await wait_until(pilot, lambda: getattr(app.screen, "loaded", False))
        s = app.screen
        await pilot.press("j", "j", "j")                            # demo-g1-3: static fail, never compiled
        await wait_until(pilot, lambda: s.current_candidate() == "demo-g1-3")
        await pilot.press("o")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "OverrideScreen")
        ov = app.screen
        ov.query_one("#ov-stage").value = "timing"                  # a stage without any verdict
        ov.query_one("#ov-to").value = "pass"
        await pilot.pause(0.05)
        await pilot.press("ctrl+s")                                 # no reason yet
        await pilot.pause(0.05)
        assert "An override needs a reason." in screen_text(app)
        note = str(ov.query_one("#ov-note").render())
        assert "never invent a measurement" in note
        ov.query_one("#ov-reason").focus()
        await type_text(pilot, "checked by hand")
        await pilot.pause(0.05)
        assert "An override needs a reason." not in screen_text(app)   # answered: the warning is gone
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")
        await wait_until(pilot, lambda: "override demo-g1-3 timing" in "\n".join(s.query_one("#log").lines_written))
        log = "\n".join(s.query_one("#log").lines_written)
        assert "timing: none -> pass" in log and "None" not in log
        await pilot.press("enter")                                  # the candidate, verdicts tab
        await wait_until(pilot, lambda: type(app.screen).__name__ == "CandidateScreen")
        await pilot.press("v")
        await pilot.pause(0.2)
        text = screen_text(app)
        assert "none→pass" in text and "None" not in text
    run_app(fake_backend(demo), scenario)


def _user_tasks(tmp_path: Path) -> Path:
    """A folder of the user's own tasks: a native copy of gelu_bias (with its baseline) and a KernelBench
    problem (no baseline)."""
    mine = tmp_path / "my-tasks"
    shutil.copytree(REPO / "tasks" / "gelu_bias", mine / "my_gelu")
    toml = mine / "my_gelu" / "task.toml"
    toml.write_text(toml.read_text().replace('name = "gelu_bias"', 'name = "my_gelu"', 1))
    shutil.copy(FIXTURES / "kernelbench" / "matmul_relu.py", mine / "matmul_relu.py")
    return mine


def test_tasks_from_kbench_tasks_and_a_session_on_one(tmp_path, monkeypatch):
    mine = _user_tasks(tmp_path)
    monkeypatch.setenv("KBENCH_TASKS", str(mine))

    async def scenario(app, pilot):
        home = app.screen
        keys = [str(r.value) for r in home.query_one("#tasks").rows]
        assert str(mine / "my_gelu") in keys and "gelu_bias" in keys   # the user's, after the built-in ones
        assert "$KBENCH_TASKS" in screen_text(app)
        f = await open_form(app, pilot)
        sel = f.query_one("#ns-task")
        assert str(mine / "my_gelu") in options(sel) and str(mine / "matmul_relu.py") in options(sel)
        sel.value = str(mine / "my_gelu")
        f.query_one("#ns-generations").value = "1"
        f.query_one("#ns-population").value = "2"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")
        r = app.backend.runner("my_gelu-fwd-tuner")
        await wait_until(pilot, lambda: not r.running, timeout=30)
        info = app.backend.ws.session("my_gelu-fwd-tuner")
        assert info.task == "my_gelu" and info.candidates == 3
    run_app(fake_backend(tmp_path / "ws"), scenario)


def test_failed_start_says_why_and_leaves_no_session(tmp_path, monkeypatch):
    mine = _user_tasks(tmp_path)
    monkeypatch.setenv("KBENCH_TASKS", str(mine))

    async def scenario(app, pilot):
        f = await open_form(app, pilot)
        f.query_one("#ns-task").value = str(mine / "matmul_relu.py")   # no baseline: the tuner has no parent
        await pilot.press("ctrl+s")
        try:
            await wait_until(pilot, lambda: "cannot start" in screen_text(app))
        except AssertionError:
            raise AssertionError(screen_text(app))
        assert type(app.screen).__name__ == "NewSessionScreen"
        assert "the tuner proposer cannot start this session" in str(f.query_one("#ns-error").render())
        assert app.backend.ws.sessions() == []
        assert not f.query_one("#ns-start").disabled                    # try again with another choice
    run_app(fake_backend(tmp_path / "ws"), scenario)


def test_replay_session_from_a_folder(tmp_path):
    rec = tmp_path / "rec"
    base = REPO / "tasks" / "gelu_bias" / "baselines" / "forward"
    for i in (1, 2):
        (rec / f"c{i}").mkdir(parents=True)
        shutil.copy(base / "binding.cpp", rec / f"c{i}" / "binding.cpp")
        (rec / f"c{i}" / "kernel.cu").write_text((base / "kernel.cu").read_text() + f"\n// replayed {i}\n")

    async def scenario(app, pilot):
        f = await open_form(app, pilot)
        assert not f.query_one("#ns-replay-box").display
        f.query_one("#ns-proposer").value = "replay"
        await pilot.pause(0.05)
        assert f.query_one("#ns-replay-box").display
        await pilot.press("ctrl+s")                                     # nothing to re-play given yet
        await wait_until(pilot, lambda: "cannot start: replay needs something to re-play" in screen_text(app))
        f.query_one("#ns-replay").value = str(rec)
        f.query_one("#ns-generations").value = "1"
        f.query_one("#ns-population").value = "2"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")
        r = app.backend.runner("gelu_bias-fwd-replay")
        await wait_until(pilot, lambda: not r.running, timeout=30)
        views = app.backend.ws.candidates("gelu_bias-fwd-replay")
        texts = [app.backend.ws.files(v.id).files["kernel.cu"] for v in views]
        assert sum("replayed" in t for t in texts) == 2
        assert app.backend.ws.session("gelu_bias-fwd-replay").config["replay_from"] == str(rec)
    run_app(fake_backend(tmp_path / "ws", env={}), scenario)


def test_human_session_runs_the_editor(tmp_path):
    """A session of hand edits: each proposal runs $EDITOR (here a script appending a line) on a parent."""
    editor = tmp_path / "editor.py"
    editor.write_text("import sys\nopen(sys.argv[1], 'a').write('\\n// edited by hand\\n')\n")
    cmd = f"{sys.executable} {editor}"

    async def scenario(app, pilot):
        f = await open_form(app, pilot)
        f.query_one("#ns-proposer").value = "human"
        f.query_one("#ns-generations").value = "1"
        f.query_one("#ns-population").value = "1"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")
        r = app.backend.runner("gelu_bias-fwd-human")
        await wait_until(pilot, lambda: not r.running, timeout=30)
        views = app.backend.ws.candidates("gelu_bias-fwd-human")
        assert [v.record.operator for v in views] == ["baseline", "mutate"]
        assert "edited by hand" in app.backend.ws.files(views[1].id).files["kernel.cu"]
    run_app(fake_backend(tmp_path / "ws", env={"EDITOR": cmd}), scenario)


def test_home_says_waiting_for_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_FAKE_NO_GPU", "1")           # the fake evaluator finds no GPU, as a laptop would

    async def scenario(app, pilot):
        f = await open_form(app, pilot)
        f.query_one("#ns-generations").value = "1"
        f.query_one("#ns-population").value = "2"
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")
        s = app.screen
        r = app.backend.runner("gelu_bias-fwd-tuner")
        await wait_until(pilot, lambda: not r.running, timeout=30)
        await wait_until(pilot, lambda: s.loaded and len(s.data.views) == 3)
        s.update_progress()
        progress = str(s.query_one("#progress").text)
        assert "[waiting for a GPU (3)]" in progress and "evaluated 0" in progress   # compiled, not evaluated
        assert screen_text(app).count("waiting for a GPU") >= 3      # the lineage's status column
        await pilot.press("escape")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "HomeScreen")
        await wait_until(pilot, lambda: app.screen.query_one("#sessions").row_count == 1)
        await pilot.pause(0.2)
        row = app.screen.query_one("#sessions").get_row_at(0)
        assert str(row[8]) == "waiting for a GPU (3)"
    run_app(fake_backend(tmp_path / "ws"), scenario)
