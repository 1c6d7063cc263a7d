"""Snapshots of the main screens at 120x35, and of the home, session and candidate screens at 100 and 200
columns (a laptop's half screen, a wide monitor), with pytest-textual-snapshot: each test drives the app on the
demo workspace to a screen, and `snap_compare` compares an SVG screenshot of it (text and colours) with the one in
tests/tui/__snapshots__/test_tui_snapshots/. On a difference the test fails and snapshot_report.html shows both.
After an intended change: pytest tests/tui/test_tui_snapshots.py --snapshot-update, and look at the new SVGs.

What changes from run to run is pinned: the workspace's content (fixed verdict times, tests.doubles.tui), the
terminal size, no GPU and no API key (fake_backend), animations off, the current folder (the title shows the
workspace as `./ws`), and the commit shas (the session's root commit records when and where it was made, the
task's absolute path included, so every sha differs from one checkout to another): the candidate screen shows a
stand-in made from the candidate's id.
"""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from tests.doubles.tui import build_demo_workspace, fake_backend, screen_text, wait_until

SIZE = (120, 35)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    path = tmp_path_factory.mktemp("snap") / "ws"          # the home screen shows the folder's name: "ws"
    build_demo_workspace(path).close()
    return path


@pytest.fixture
def app(workspace, monkeypatch):
    from kbench_tui.app import KbenchApp

    monkeypatch.delenv("KBENCH_TASKS", raising=False)        # the home screen lists the built-in tasks only
    monkeypatch.chdir(workspace.parent)                       # the title: ./ws
    backend = fake_backend(workspace)
    view = backend.view

    def pinned_view(cid):
        v = view(cid)
        sha = hashlib.sha1(v.record.id.encode()).hexdigest()
        return dataclasses.replace(v, record=dataclasses.replace(v.record, commit=sha))
    backend.view = pinned_view
    app = KbenchApp(backend=backend)                         # closes the backend when it exits
    app.animation_level = "none"                             # no tab underline caught mid-slide
    return app


async def settle(pilot) -> None:
    """Until the screen stops changing: workers' results, and the layout they cause (a DataTable sizes its
    columns when idle), so a loaded machine shows the same screen."""
    last = None
    for _ in range(60):
        await pilot.pause(0.05)
        text = screen_text(pilot.app)
        if text == last:
            return
        last = text


async def wait_loaded(pilot) -> None:
    app = pilot.app
    await wait_until(pilot, lambda: getattr(app.screen, "loaded", False))


async def at_home(pilot) -> None:
    app = pilot.app
    await wait_until(pilot, lambda: getattr(app.screen, "sessions_loaded", None) is not None
                     and getattr(app.screen, "tasks_loaded", False))
    await settle(pilot)


async def at_session(pilot) -> None:
    """The demo session, the cursor on its third row (demo-g1-2, which failed correctness)."""
    await at_home(pilot)
    await pilot.press("enter")
    await wait_loaded(pilot)
    await pilot.press("j", "j")
    await settle(pilot)


async def at_candidate_verdicts(pilot) -> None:
    await at_session(pilot)
    await pilot.press("enter")
    await wait_loaded(pilot)
    await pilot.press("v")
    await settle(pilot)


async def at_candidate_diff(pilot) -> None:
    await at_candidate_verdicts(pilot)
    await pilot.press("d")
    await settle(pilot)


async def at_override(pilot) -> None:
    await at_candidate_diff(pilot)
    await pilot.press("o")
    await wait_until(pilot, lambda: type(pilot.app.screen).__name__ == "OverrideScreen")
    await settle(pilot)


async def at_help(pilot) -> None:
    """Help, opened on the home screen after coming back from the override form."""
    await at_override(pilot)
    await pilot.press("escape", "escape", "escape", "question_mark")
    await wait_until(pilot, lambda: type(pilot.app.screen).__name__ == "HelpScreen")
    await settle(pilot)


@pytest.mark.parametrize("steps", [at_home, at_session, at_candidate_verdicts, at_candidate_diff, at_override,
                                   at_help], ids=lambda f: f.__name__.removeprefix("at_"))
def test_snapshot(snap_compare, app, steps):
    assert snap_compare(app, terminal_size=SIZE, run_before=steps)


@pytest.mark.parametrize("width", [100, 200])
@pytest.mark.parametrize("steps", [at_home, at_session, at_candidate_verdicts],
                         ids=lambda f: f.__name__.removeprefix("at_"))
def test_snapshot_width(snap_compare, app, steps, width):
    """At 100 columns the footer keeps Diff, Override, Re-eval, Export and Help, the lineage's titles keep the
    tuner's knob change, the candidate's title wraps; at 200 nothing is stretched out of reach."""
    assert snap_compare(app, terminal_size=(width, 40), run_before=steps)
