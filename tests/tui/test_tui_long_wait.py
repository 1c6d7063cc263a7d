"""A build that waits long says so in the app: while the first build waits for torch's precompiled header, the
candidate's row reads "compiling" (not "pending") and the progress line says what it waits on; when its compile
stage ends, the row shows the verdict. Headless, a fake evaluator that says the wait and holds the build."""

from __future__ import annotations

import threading

from tests.doubles.evaluator import FakeEvaluator
from engine.harness.build.wait import PCH_WAIT
from kbench_tui.backend import Backend
from tests.doubles.tui import run_app, screen_text, type_text, wait_until


class HeldBuild(FakeEvaluator):
    """Says that its first build waits for the PCH, and holds every evaluation until `go` is set."""

    def __init__(self, task):
        super().__init__(task)
        self.go = threading.Event()
        self._first = threading.Lock()

    def expected_wait(self, candidate):
        return PCH_WAIT if self._first.acquire(blocking=False) else None

    def submit(self, candidate, on_stage=None):
        def held(v):
            self.go.wait(30)
            if on_stage:
                on_stage(v)
        return super().submit(candidate, held)


def test_a_long_build_reads_compiling_with_its_reason_not_pending(tmp_path):
    made: list[HeldBuild] = []

    def factory(task, direction):
        made.append(HeldBuild(task))
        return made[-1]
    backend = Backend(tmp_path / "ws", evaluator_factory=factory, gpus=[], env={})

    async def scenario(app, pilot):
        await pilot.press("n")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "NewSessionScreen")
        f = app.screen
        f.query_one("#ns-generations").value = "0"
        f.query_one("#ns-name").focus()
        await type_text(pilot, "waits")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")
        s = app.screen
        await wait_until(pilot, lambda: s.data is not None and s.data.views and app.long_waits("waits"))
        await pilot.pause(0.2)
        text = screen_text(app)
        row = next(line for line in text.splitlines() if "g0-1" in line and "baseline" in line)
        assert "compiling" in row and "pending" not in row, text
        assert f"g0-1 {PCH_WAIT}" in str(s.query_one("#progress").text), s.query_one("#progress").text
        made[0].go.set()
        r = app.backend.runner("waits")
        await wait_until(pilot, lambda: not r.running, timeout=30)
        await wait_until(pilot, lambda: not app.long_waits("waits") and s.data.views[0].status.stages)
        await pilot.pause(0.3)
        assert PCH_WAIT not in str(s.query_one("#progress").text)
        row = next(line for line in screen_text(app).splitlines() if "g0-1" in line and "baseline" in line)
        assert "compiling" not in row, row
    try:
        run_app(backend, scenario)
    finally:
        for ev in made:
            ev.go.set()
            ev.close(wait=False)
