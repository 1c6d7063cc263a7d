"""TUI home screen, keymap, help and command palette (headless pilots; no GPU, no network)."""

from __future__ import annotations

from kbench_tui import keymap
from tests.doubles.tui import fake_backend, run_app, screen_text, wait_until


def test_home_lists_sessions_tasks_and_notices(demo):
    async def scenario(app, pilot):
        text = screen_text(app)
        assert type(app.screen).__name__ == "HomeScreen"
        assert "demo" in text and "gelu_bias" in text and "1.950x" in text and "demo-g2-1" in text
        assert "layernorm" in text            # tasks to start from
        assert "need a GPU" in text           # no GPU: said plainly
        assert "ANTHROPIC_API_KEY" in text    # no key: said plainly
        row = app.screen.query_one("#sessions").get_row_at(0)
        assert row[0] == "demo" and row[5] == "2" and str(row[8]) == "idle"
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")
        await pilot.press("escape")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "HomeScreen")
    run_app(fake_backend(demo), scenario)


def test_first_run_creates_workspace(tmp_path):
    ws = tmp_path / "fresh"

    async def scenario(app, pilot):
        assert (ws / ".git").is_dir()
        assert app.screen.query_one("#sessions").row_count == 0
        assert app.screen.query_one("#tasks").row_count >= 3
    run_app(fake_backend(ws), scenario)


def test_keymap_from_config_remaps_and_reports(demo, tmp_path):
    (demo / ".kbench").mkdir(exist_ok=True)
    (demo / ".kbench" / "config.toml").write_text('[keys]\n"home.new" = "N"\n"no.such" = "z"\n')

    async def scenario(app, pilot):
        assert app.keymap_overrides == {"home.new": "N"}
        assert any("no.such" in p for p in app.keymap_problems)
        assert "no.such" in screen_text(app)       # the problem is shown, not fatal
        await pilot.press("n")                     # the old key no longer opens the form
        await pilot.pause(0.1)
        assert type(app.screen).__name__ == "HomeScreen"
        await pilot.press("N")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "NewSessionScreen")
    run_app(fake_backend(demo), scenario)


def test_every_binding_has_a_unique_id():
    ids = [s.id for s in keymap.all_specs()]
    assert len(ids) == len(set(ids))
    assert all("." in i for i in ids)
    keys = {s.id: s.key for s in keymap.all_specs()}
    # tig / lazygit habits from DESIGN.md
    assert keys["list.down"] == "j" and keys["list.up"] == "k" and keys["session.diff"] == "d"
    assert keys["session.prev_gen"] == "left_square_bracket" and keys["session.next_gen"] == "right_square_bracket"
    assert keys["list.search"] == "slash" and keys["app.help"] == "question_mark" and keys["app.quit"] == "q"


def test_help_screen_lists_ids_and_palette_has_commands(demo):
    async def scenario(app, pilot):
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        text = screen_text(app)
        assert "session.pause" in text and "home.new" in text
        await pilot.press("escape")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "HomeScreen")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "New session" in titles and "Keys" in titles
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "CommandPalette")
        await pilot.press("escape")
    run_app(fake_backend(demo), scenario)


def test_help_shows_remapped_key_and_palette_runs_screen_commands(demo):
    (demo / ".kbench").mkdir(exist_ok=True)
    (demo / ".kbench" / "config.toml").write_text('[keys]\n"session.mark" = "M"\n')

    async def scenario(app, pilot):
        await pilot.press("enter")
        await wait_until(pilot, lambda: getattr(app.screen, "loaded", False))
        s = app.screen
        await pilot.press("m")                             # no longer bound
        assert s.marked is None
        await pilot.press("M")
        assert s.marked == "demo-g0-1"
        cmds = {c.title: c.callback for c in app.get_system_commands(s)}
        assert "Pause / resume the evolution" in cmds and "Override a verdict" in cmds
        cmds["Mark candidate for diff"]()                  # toggles the mark off again
        assert s.marked is None
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        t = app.screen.query_one("#help-table")
        row = next(r for r in (t.get_row_at(i) for i in range(t.row_count)) if str(r[2]) == "session.mark")
        assert str(row[0]) == "M"
    run_app(fake_backend(demo), scenario)
