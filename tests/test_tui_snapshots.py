"""Text snapshots of the main screens (120x35), compared with tests/snapshots/*.txt.

pytest-textual-snapshot is not installed in this environment, so these are plain-text renders of the
screen (kbench_tui.testing.screen_text: what a terminal shows, without colours), with commit shas and
clock times normalised. After an intended change: KBENCH_UPDATE_SNAPSHOTS=1 pytest tests/test_tui_snapshots.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import env_flag
from kbench_tui.testing import build_demo_workspace, fake_backend, normalise, run_app, screen_text, wait_until

SNAPSHOTS = Path(__file__).parent / "snapshots"


def check(name: str, text: str) -> None:
    path = SNAPSHOTS / f"{name}.txt"
    text = normalise(text) + "\n"
    if env_flag("KBENCH_UPDATE_SNAPSHOTS") or not path.exists():
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text)
        if not env_flag("KBENCH_UPDATE_SNAPSHOTS"):
            pytest.fail(f"wrote a new snapshot {path}; check it and run again")
        return
    expected = path.read_text()
    if text != expected:
        import difflib
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), str(path), "screen"))
        pytest.fail(f"screen differs from {path} (KBENCH_UPDATE_SNAPSHOTS=1 to accept):\n{diff}")


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    ws = tmp_path_factory.mktemp("snap") / "ws"
    build_demo_workspace(ws).close()
    out = {}

    async def settle(pilot):
        # workers' results and the layout they cause (DataTable sizes its columns when idle): wait until
        # the screen stops changing, so a loaded machine gives the same text
        app, last = pilot.app, None
        for _ in range(60):
            await pilot.pause(0.05)
            text = screen_text(app)
            if text == last:
                return
            last = text

    async def scenario(app, pilot):
        await settle(pilot)
        out["home"] = screen_text(app)
        await pilot.press("enter")
        await wait_until(pilot, lambda: getattr(app.screen, "loaded", False))
        await pilot.press("j", "j")
        await settle(pilot)
        out["session"] = screen_text(app)
        await pilot.press("enter")
        await wait_until(pilot, lambda: getattr(app.screen, "loaded", False))
        await pilot.press("v")
        await settle(pilot)
        out["candidate_verdicts"] = screen_text(app)
        await pilot.press("d")
        await settle(pilot)
        out["candidate_diff"] = screen_text(app)
        await pilot.press("o")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "OverrideScreen")
        await settle(pilot)
        out["override"] = screen_text(app)
        await pilot.press("escape", "escape", "escape", "question_mark")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        await settle(pilot)
        out["help"] = screen_text(app)
    run_app(fake_backend(ws), scenario)
    return out


@pytest.mark.parametrize("name", ["home", "session", "candidate_verdicts", "candidate_diff", "override", "help"])
def test_snapshot(shots, name):
    check(name, shots[name])
