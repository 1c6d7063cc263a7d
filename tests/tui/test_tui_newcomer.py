"""What a kernel engineer trips over in the app on the first day, each driven through the app as a person does
(headless Textual pilot, keys, the screen read back as text): the log pane read whole and its times kept, words
instead of class names, `/` on the home screen, 100 columns, CLI advice, an override that evaluates by itself,
a damaged object on the home screen, the help, the title. No GPU, no network; the fake evaluator."""

from __future__ import annotations

import time

from engine.evolve.events import EVENT_TYPES
from engine.gpu_wait import NO_GPU, WAITING_EVENT
from engine.workspace import Event, Workspace
from tests.doubles.tui import fake_backend, run_app, screen_text, type_text, wait_until

CLASS_NAMES = [t.__name__ for t in EVENT_TYPES]


async def open_session(app, pilot, row: int = 0):
    await pilot.press("enter")
    await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen"
                     and getattr(app.screen, "loaded", False))
    await pilot.press(*["j"] * row)
    await pilot.pause()
    return app.screen


async def run_new_session(app, pilot, name: str, generations: str = "1", population: str = "2"):
    """The new-session form, as a person fills it in (tuner on gelu_bias), then until the evolution ends."""
    await pilot.press("n")
    await wait_until(pilot, lambda: type(app.screen).__name__ == "NewSessionScreen")
    f = app.screen
    f.query_one("#ns-generations").value = generations
    f.query_one("#ns-population").value = population
    f.query_one("#ns-name").focus()
    await type_text(pilot, name)
    await pilot.press("ctrl+s")
    await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")
    r = app.backend.runner(name)
    await wait_until(pilot, lambda: not r.running, timeout=30)
    s = app.screen
    await wait_until(pilot, lambda: getattr(s, "loaded", False) and "stopped" in s.last_event.lower())
    await pilot.pause(0.2)
    return s


def rendered(log) -> list[str]:
    """The log pane's lines as drawn (after wrapping)."""
    return [strip.text for strip in log.lines]


def test_log_lines_wrap_whole_keep_their_times_and_l_enlarges_the_pane(tmp_path):
    name = "gelu-bias-with-a-name-long-enough-to-wrap"

    async def scenario(app, pilot):
        s = await run_new_session(app, pilot, name)
        log = s.query_one("#log")
        width = log.scrollable_content_region.width
        lines = log.lines_written
        assert any(len(line) + 9 > width for line in lines), (width, lines)    # a line longer than the pane
        shown = "".join("".join(rendered(log)).split())
        for line in lines:                                      # each read whole, wrapped, not cut at the edge
            assert "".join(line.split()) in shown, line
        assert not any(c in str(s.query_one("#progress").text) for c in CLASS_NAMES), s.query_one("#progress").text
        assert "stopped: all 1 generation(s) done" in str(s.query_one("#progress").text)
        # `l`: larger (the lineage shrinks, the plot hides), then hidden, then back
        height = log.size.height
        await pilot.press("l")
        await pilot.pause(0.1)
        assert log.size.height > 2 * height and not s.query_one("#plot").display
        await pilot.press("l")
        await pilot.pause(0.1)
        assert not log.display
        await pilot.press("l")
        await pilot.pause(0.1)
        assert log.display and log.size.height == height and s.query_one("#plot").display
        # opened again later: every line keeps the time its event happened
        first_at = app.session_log(name)[0][0]
        await pilot.press("escape")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "HomeScreen")
        await pilot.pause(max(0.0, first_at + 1.2 - time.time()))
        app.open_session(name)
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")
        await pilot.pause(0.2)
        again = rendered(app.screen.query_one("#log"))
        assert again[0].startswith(time.strftime("%H:%M:%S ", time.localtime(first_at))), (again[0], first_at)
        assert not again[0].startswith(time.strftime("%H:%M:%S", time.localtime()))
    run_app(fake_backend(tmp_path / "ws"), scenario, size=(64, 40))


def test_a_waiting_candidates_history_reads_in_words(demo):
    with Workspace.open(demo) as ws:
        ws.record("demo-g1-2", [Event(WAITING_EVENT, {"reason": NO_GPU, "attempts": 1,
                                                      "executor": "LocalPipelineExecutor"}, "2026-01-02T00:00:00Z")])

    async def scenario(app, pilot):
        await open_session(app, pilot, row=2)
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "CandidateScreen" and app.screen.loaded)
        await pilot.press("v")
        await pilot.pause(0.2)
        text = screen_text(app)
        assert f"waiting for a GPU: {NO_GPU} (local executor, 1 attempt)" in text, text
        assert "LocalPipelineExecutor" not in text and "executor=" not in text
    run_app(fake_backend(demo), scenario, size=(140, 40))


def test_j_and_k_scroll_every_tab_of_the_candidate_screen(demo):
    """j on the Verdicts tab looked for a widget by the wrong id: the app ended with a traceback."""
    async def scenario(app, pilot):
        await open_session(app, pilot, row=2)
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "CandidateScreen" and app.screen.loaded)
        for tab in ("c", "d", "v", "f", "t"):
            await pilot.press(tab, "j", "j", "k")
            await pilot.pause(0.05)
            assert type(app.screen).__name__ == "CandidateScreen" and app.is_running, tab
    run_app(fake_backend(demo), scenario)


def test_slash_on_home_finds_a_task_and_a_session(demo):
    async def scenario(app, pilot):
        await pilot.press("slash")
        await type_text(pilot, "softmax")
        assert type(app.screen).__name__ == "HomeScreen"             # not the command palette
        await pilot.press("enter")
        tasks = app.screen.query_one("#tasks")
        assert app.focused is tasks and tasks.get_row_at(tasks.cursor_row)[0] == "softmax"
        await pilot.press("enter")                                    # enter on it: a session of it
        await wait_until(pilot, lambda: type(app.screen).__name__ == "NewSessionScreen")
        assert app.screen.query_one("#ns-task").value == "softmax"
        await pilot.press("escape")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "HomeScreen")
        await pilot.press("slash")
        await type_text(pilot, "dem")
        await pilot.press("enter")
        assert app.focused is app.screen.query_one("#sessions")
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")
        assert app.screen.session == "demo"
    run_app(fake_backend(demo), scenario)


def test_at_100_columns_the_footer_and_the_titles_show_what_matters(demo):
    title = "gelu_bias-forward-baseline-vec2-block_size512-rows_per_block2"
    with Workspace.open(demo) as ws:
        base = ws.files("demo-g0-1")
        files = dict(base.files, **{"kernel.cu": base.files["kernel.cu"] + "\n// tuned\n"})
        ws.commit_candidate("demo", type(base)(base.format, files, "tuned"), parents=["demo-g1-1"], operator="tune",
                            proposer="tuner", generation=2, title=title, rationale="knobs: ROWS_PER_BLOCK 4 -> 2")

    async def scenario(app, pilot):
        s = await open_session(app, pilot)
        footer = screen_text(app).splitlines()[-1]
        for word in ("Back", "Diff", "Override", "Re-eval", "Export", "Help", "Quit"):
            assert word in footer, footer
        row = next(line for line in screen_text(app).splitlines() if " g2-2 " in line)
        assert row.rstrip().endswith("size512-rows_per_block2") and "…" in row, row   # its change, not its prefix
        await pilot.press("end")
        await wait_until(pilot, lambda: s.current_candidate() == "demo-g2-2")
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "CandidateScreen" and app.screen.loaded)
        text = screen_text(app)
        head = "".join("".join(text.splitlines()[1:5]).split())     # the title, however it wraps
        assert f"{title}—knobs:ROWS_PER_BLOCK4->2" in head, text
        footer = text.splitlines()[-1]
        for word in ("Back", "Diff", "Override", "Re-eval", "Export", "Help"):
            assert word in footer, footer
    run_app(fake_backend(demo), scenario, size=(100, 35))
