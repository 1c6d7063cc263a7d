"""Helpers for the app's tests and scripts/bench_tui.py: a small deterministic workspace, a plain-text render
of the current screen (for tests that look for a line on it), and a Backend wired to the fake evaluator.
The screens' snapshots (colours and all) are pytest-textual-snapshot's: tests/tui/test_tui_snapshots.py."""

from __future__ import annotations

import asyncio
import html
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len

from engine.candidates import Candidate, load_candidate
from engine.tasks.loader import builtin_tasks_dir, load_task
from engine.verdict import Stage, Status, Verdict
from engine.workspace import ConfigTiming, Measurement, VerdictNote, Workspace
from kbench_tui.app import KbenchApp
from kbench_tui.backend import Backend
from tests.doubles.evaluator import FakeEvaluator

if TYPE_CHECKING:
    from textual.app import App
    from textual.pilot import Pilot

AT = "2026-01-01T00:00:00.000Z"
ENV = dict(gpu="FakeGPU 80GB", driver="0.0", torch="fake", cuda="fake")


# One run of text in the SVG that App.export_screenshot writes (rich's Console.export_svg): its x in pixels, its
# width (len(text) cells), the row it is clipped to, and the text with spaces as &#160; and HTML escapes.
_SVG_TEXT = re.compile(r'<text class="[^"]*" x="([\d.]+)" y="[\d.]+" textLength="([\d.]+)" '
                       r'clip-path="url\(#[\w-]*-line-(\d+)\)">(.*?)</text>')


def screen_text(app: App[Any]) -> str:
    """The current screen as plain text, as a terminal would show it (no colours), trailing spaces stripped.

    Read back from Textual's public screenshot (App.export_screenshot, an SVG of the screen), which places each
    run of text at its cell: there is no public plain-text export, and rendering the screen ourselves would mean
    reading the private compositor. ~10 ms for a 120x35 screen."""
    svg = app.export_screenshot()
    runs: dict[int, list[tuple[int, str]]] = {}
    cell_px = 0.0
    for x, length, row, content in _SVG_TEXT.findall(svg):
        text = html.unescape(content.replace("&#160;", " "))
        cell_px = cell_px or float(length) / len(text)          # textLength is len(text) cells wide
        runs.setdefault(int(row), []).append((round(float(x) / cell_px), text))
    if not runs:        # every screen has a title: the SVG's layout changed, and "not in" checks would pass blindly
        raise AssertionError("screen_text: no text found in App.export_screenshot()'s SVG (has its format changed?)")
    lines = []
    for row in range(app.size.height):
        line = ""
        for col, text in sorted(runs.get(row, ())):
            line += " " * (col - cell_len(line)) + text           # x counts cells (wide characters take two)
        lines.append(line.rstrip())
    return "\n".join(lines)


def _passing(ws: Workspace, cid: str, speedup: float, configs: list[str]) -> None:
    timings = tuple(ConfigTiming(n, round(1.0 / speedup, 4), 0.001, 1.0, 1.2) for n in configs)
    ws.record(cid, [VerdictNote(Verdict(Stage.STATIC, Status.PASS, "clean"), AT),
                    VerdictNote(Verdict(Stage.COMPILE, Status.PASS, "compiled"), AT),
                    VerdictNote(Verdict(Stage.CORRECTNESS, Status.PASS, f"{len(configs)} configs x 2 trials within tolerance"), AT),
                    VerdictNote(Verdict(Stage.TIMING, Status.PASS, f"geomean speedup vs eager {speedup:.2f}x"), AT),
                    Measurement(speedup, speedup * 1.2, timings, at=AT, **ENV)])


def build_demo_workspace(path: str | Path, session: str = "demo", task_name: str = "gelu_bias") -> Workspace:
    """A session of 5 candidates over 3 generations: the baseline, a faster mutation, one that fails
    correctness, one a static check rejected (never compiled), and a crossover."""
    ws = Workspace.create(path)
    task = load_task(task_name)
    configs = [c.name for c in task.configs]
    ws.start_session(session, task, proposer="tuner")
    base = load_candidate(builtin_tasks_dir() / task_name / "baselines" / "forward")
    b = ws.commit_candidate(session, base, operator="baseline", proposer="baseline", generation=0,
                            title="task baseline", rationale="the shipped baseline", prompt="(baseline)\n")
    _passing(ws, b.id, 1.25, configs)

    def variant(marker: str, name: str) -> Candidate:
        files = dict(base.files)
        files["kernel.cu"] = files["kernel.cu"] + f"\n// {marker}\n"
        return Candidate(base.format, files, name)

    m1 = ws.commit_candidate(session, variant("FAKE_SPEEDUP=1.80 vectorised float4 loads", "vec4"), parents=[b.id],
                             operator="mutate", title="vectorised float4 loads", rationale="wider loads",
                             prompt="# Proposal\n\nMake it faster with float4 loads.\n\n## Answer\n\nDone.\n")
    _passing(ws, m1.id, 1.80, configs)
    m2 = ws.commit_candidate(session, variant("FAIL_CORRECT unrolled tail", "unrolled"), parents=[b.id],
                             operator="mutate", title="unroll the tail loop", rationale="fewer branches")
    ws.record(m2.id, [VerdictNote(Verdict(Stage.STATIC, Status.PASS, "clean"), AT),
                      VerdictNote(Verdict(Stage.COMPILE, Status.PASS, "compiled"), AT),
                      VerdictNote(Verdict(Stage.CORRECTNESS, Status.FAIL, "odd-37x1000: max abs err 3.1e-2"), AT)])
    m3 = ws.commit_candidate(session, variant("FAKE_SPEEDUP=1.50 cached weights", "cached"), parents=[b.id],
                             operator="mutate", title="cache the bias in shared memory", rationale="reuse")
    ws.record(m3.id, [VerdictNote(Verdict(Stage.STATIC, Status.FAIL, "static check: pointer-keyed cache"), AT)])
    x = ws.commit_candidate(session, variant("FAKE_SPEEDUP=1.95 crossover", "cross"), parents=[m1.id, b.id],
                            operator="crossover", title="float4 loads + baseline tail", rationale="combine")
    _passing(ws, x.id, 1.95, configs)
    return ws


def fake_backend(path: str | Path, delay_s: float = 0.0, **kw: Any) -> Backend:
    """A Backend over the workspace at `path` whose every evaluator is a FakeEvaluator (kept in
    `backend.fake_evaluators`, in the order made); no GPU unless `gpus=` says, an empty environment unless `env=`."""
    made: list[FakeEvaluator] = []

    def factory(task, direction):
        ev = FakeEvaluator(task, delay_s=delay_s)
        made.append(ev)
        return ev
    b = Backend(path, evaluator_factory=factory, gpus=kw.pop("gpus", []), env=kw.pop("env", {}), **kw)
    b.fake_evaluators = made
    return b


def run_app(backend: Backend, scenario, size: tuple[int, int] = (120, 35)) -> Any:
    """Run `scenario(app, pilot)` (async) against a KbenchApp on `backend`, headless; returns its result."""
    async def main():
        app = KbenchApp(backend=backend)
        app.animation_level = "none"        # deterministic screens (no tab underline mid-slide)
        async with app.run_test(size=size) as pilot:
            await wait_until(pilot, lambda: getattr(app.screen, "sessions_loaded", None) is not None
                             and getattr(app.screen, "tasks_loaded", False))
            await pilot.pause()
            return await scenario(app, pilot)

    return asyncio.run(main())


async def wait_until(pilot: Pilot[Any], pred, timeout: float = 10.0, step: float = 0.02) -> None:
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {getattr(pred, '__name__', pred)}")
        await pilot.pause(step)


async def type_text(pilot: Pilot[Any], text: str) -> None:
    names = {" ": "space", "-": "minus", ".": "full_stop", ",": "comma", ":": "colon", "/": "slash", "_": "underscore"}
    await pilot.press(*[names.get(c, c) for c in text])
