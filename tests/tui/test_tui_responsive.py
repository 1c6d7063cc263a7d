"""The UI stays responsive while a long evaluation runs: the evaluation is in a worker thread, so key
presses are handled at once and the result appears when it is done."""

from __future__ import annotations

import asyncio
import time

from textual import events

from engine.workspace import Workspace
from tests.doubles.tui import build_demo_workspace, fake_backend, run_app, wait_until


def test_keys_handled_while_a_long_evaluation_runs(tmp_path):
    build_demo_workspace(tmp_path / "ws").close()
    backend = fake_backend(tmp_path / "ws", delay_s=3.0)     # a "long" evaluation: 3 s

    async def scenario(app, pilot):
        await pilot.press("enter")
        await wait_until(pilot, lambda: getattr(app.screen, "loaded", False))
        s = app.screen
        table = s.query_one("#lineage")
        await pilot.press("j", "e")
        t_start = time.monotonic()
        await wait_until(pilot, lambda: app.backend.queued == 1)
        latencies = []
        for i in range(12):
            before = table.cursor_row
            key = "j" if (i // 3) % 2 == 0 else "k"
            t0 = time.monotonic()
            app.post_message(events.Key(key, key))
            while table.cursor_row == before:
                await asyncio.sleep(0.001)
            latencies.append(time.monotonic() - t0)
            await asyncio.sleep(0.05)
        assert app.backend.queued == 1, "the evaluation finished before the key presses: not a test of anything"
        assert time.monotonic() - t_start < 3.0
        assert max(latencies) < 0.25, latencies
        # the progress line says what is running; the result arrives as a message when it is done
        await wait_until(pilot, lambda: "re-evaluations queued/running: 1" in str(s.query_one("#progress").text))
        await wait_until(pilot, lambda: app.backend.queued == 0, timeout=15)
        await wait_until(pilot, lambda: "re-evaluated demo-g1-1" in "\n".join(s.query_one("#log").lines_written))
    run_app(backend, scenario)
    with Workspace.open(tmp_path / "ws") as ws:
        assert len(ws.status("demo-g1-1").measurements) == 2
