"""TUI session and candidate screens and their actions, driven by keys; each test checks what the engine
recorded in the workspace (notes, commits, export). Headless, fake evaluator, no GPU, no network."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from engine.workspace import Workspace
from tests.doubles.tui import fake_backend, run_app, screen_text, type_text, wait_until


async def open_session(app, pilot):
    await pilot.press("enter")
    await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen" and getattr(app.screen, "loaded", False))
    await pilot.pause()
    return app.screen


def test_session_screen_rows_lineage_and_navigation(demo):
    async def scenario(app, pilot):
        s = await open_session(app, pilot)
        text = screen_text(app)
        for cell in ("g0-1", "g1-1", "g1-2", "g1-3", "g2-1", "fail correctness", "fail static", "1.950x",
                     "g1-1 g0-1", "best", "median"):
            assert cell in text, cell
        assert s.current_candidate() == "demo-g0-1"
        await pilot.press("j")
        assert s.current_candidate() == "demo-g1-1"
        await pilot.press("right_square_bracket")           # ] next generation
        assert s.current_candidate() == "demo-g2-1"
        assert "g2-1(×g1-1 g0-1) ← g1-1 ← g0-1 ← root" in str(s.query_one("#selection").text)
        await pilot.press("left_square_bracket")            # [ previous generation
        assert s.current_candidate() == "demo-g1-1"
        await pilot.press("j", "j", "p")                    # p: jump to the parent
        assert s.current_candidate() == "demo-g0-1"
        await pilot.press("slash")
        await type_text(pilot, "g1-3")
        await pilot.press("enter")
        assert s.current_candidate() == "demo-g1-3"
        await pilot.press("k")
        assert s.current_candidate() == "demo-g1-2"
        # fitness per generation: best and median
        assert [(g.generation, g.best, g.median) for g in s.data.stats] == [(0, 1.25, 1.25), (1, 1.8, 1.8),
                                                                           (2, 1.95, 1.95)]
    run_app(fake_backend(demo), scenario)


def test_candidate_tabs_code_diff_verdicts_profile_prompt(demo):
    async def scenario(app, pilot):
        s = await open_session(app, pilot)
        await pilot.press("j", "enter")
        await wait_until(pilot, lambda: getattr(app.screen, "loaded", False))
        c = app.screen
        assert c.cid == "demo-g1-1"
        text = screen_text(app)
        assert "kernel.cu" in text and "__global__" in text and "binding.cpp" not in text.split("kernel.cu")[0]
        await pilot.press("d")
        await pilot.pause()
        text = screen_text(app)
        assert "diff demo-g0-1 → demo-g1-1" in text and "+// FAKE_SPEEDUP=1.80" in text
        await pilot.press("v")
        await pilot.pause()
        text = screen_text(app)
        assert "correctness" in text and "FakeGPU 80GB" in text and "1.800x" in text and "2026-01-01" in text
        await pilot.press("f")
        await pilot.pause()
        assert "latest measurement on FakeGPU 80GB" in screen_text(app)
        await pilot.press("t")
        await pilot.pause()
        assert "float4 loads" in screen_text(app)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is s)
    run_app(fake_backend(demo), scenario)


def test_diff_against_a_marked_candidate(demo):
    async def scenario(app, pilot):
        s = await open_session(app, pilot)
        await pilot.press("j", "j", "m")                    # mark g1-2
        assert s.marked == "demo-g1-2"
        await pilot.press("j", "j", "d")                    # diff g2-1 against the mark
        await wait_until(pilot, lambda: getattr(app.screen, "loaded", False))
        await pilot.pause()
        text = screen_text(app)
        assert "diff demo-g1-2 → demo-g2-1" in text
        assert "-// FAIL_CORRECT unrolled tail" in text and "+// FAKE_SPEEDUP=1.95 crossover" in text
    run_app(fake_backend(demo), scenario)


def test_override_records_note_and_e_evaluates_it(demo):
    async def scenario(app, pilot):
        s = await open_session(app, pilot)
        await pilot.press("j", "j", "j")                    # g1-3: rejected by a static check, never compiled
        assert s.current_candidate() == "demo-g1-3"
        await pilot.press("o")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "OverrideScreen")
        assert app.screen.query_one("#ov-stage").value == "static"   # the blocking stage is preselected
        assert app.screen.query_one("#ov-to").value == "pass"
        await pilot.press("ctrl+s")                          # no reason: refused
        assert type(app.screen).__name__ == "OverrideScreen"
        assert "needs a reason" in screen_text(app)
        await type_text(pilot, "false positive: the cache is keyed by shape")
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")
        # the override note; the evaluation only when asked for (e)
        await wait_until(pilot, lambda: "e evaluates it" in "\n".join(s.query_one("#log").lines_written))
        assert app.backend.ws.status("demo-g1-3").measurement is None
        await pilot.press("e")
        await wait_until(pilot, lambda: app.backend.ws.status("demo-g1-3").measurement is not None)
        await wait_until(pilot, lambda: "re-evaluated demo-g1-3" in "\n".join(s.query_one("#log").lines_written))
    backend = fake_backend(demo)
    run_app(backend, scenario)
    with Workspace.open(demo) as ws:
        st = ws.status("demo-g1-3")
        assert len(st.overrides) == 1
        o = st.overrides[0]
        assert (o.stage, o.from_status, o.to_status.value) == ("static", "fail", "pass")
        assert o.reason == "false positive: the cache is keyed by shape"
        assert st.status_of("static").value == "pass" and st.speedup == pytest.approx(1.5)
        assert any(e.event == "reevaluated" for e in st.events)
        assert ws.best("demo").id == "demo-g2-1"


def test_override_from_candidate_screen_without_reentry(demo):
    async def scenario(app, pilot):
        await open_session(app, pilot)
        await pilot.press("j", "enter")                     # g1-1 passes; overrule its timing verdict
        await wait_until(pilot, lambda: getattr(app.screen, "loaded", False))
        await pilot.press("o")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "OverrideScreen")
        app.screen.query_one("#ov-stage").value = "timing"
        app.screen.query_one("#ov-to").value = "suspicious"
        await type_text(pilot, "faster than the floor on odd sizes")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.backend.ws.status("demo-g1-1").overrides)
        await wait_until(pilot, lambda: type(app.screen).__name__ == "CandidateScreen")
        await pilot.press("v")
        await wait_until(pilot, lambda: "timing       suspicious" in screen_text(app))
        assert "pass→suspicious: faster than" in screen_text(app), screen_text(app)
        assert app.backend.queued == 0                      # blocked now: nothing to re-evaluate
    run_app(fake_backend(demo), scenario)
    with Workspace.open(demo) as ws:
        assert ws.status("demo-g1-1").status_of("timing").value == "suspicious"
        assert ws.best("demo").id == "demo-g2-1"


def test_reevaluate_queues_and_appends_measurement(demo):
    backend = fake_backend(demo, delay_s=0.3)

    async def scenario(app, pilot):
        s = await open_session(app, pilot)
        await pilot.press("j", "e", "j", "j", "j", "e")     # g1-1 then g2-1: queued one behind the other
        await wait_until(pilot, lambda: app.backend.queued >= 1)
        await wait_until(pilot, lambda: app.backend.queued == 0 and len(
            app.backend.ws.status("demo-g2-1").measurements) == 2, timeout=15)
        await wait_until(pilot, lambda: "re-evaluated demo-g2-1" in "\n".join(s.query_one("#log").lines_written))
        log = "\n".join(s.query_one("#log").lines_written)
        assert "re-evaluate demo-g1-1: compile pass" in log          # stage progress reached the UI
    run_app(backend, scenario)
    with Workspace.open(demo) as ws:
        assert len(ws.status("demo-g1-1").measurements) == 2
        assert ws.status("demo-g1-1").measurement.gpu == "FakeGPU"
        assert sum(1 for e in ws.status("demo-g2-1").events if e.event == "reevaluated") == 1


def test_edit_in_editor_creates_human_candidate(demo):
    def fake_editor(cmd, cwd=None, **kw):
        kernel = Path(cmd[1])
        assert kernel.name == "kernel.cu"
        kernel.write_text(kernel.read_text().replace("FAKE_SPEEDUP=1.95", "FAKE_SPEEDUP=2.10 hand tuned"))
        (Path(cwd) / "RATIONALE.md").write_text("tuned by hand")
        return subprocess.CompletedProcess(cmd, 0)

    backend = fake_backend(demo, env={"EDITOR": "myeditor"}, editor_run=fake_editor)

    async def scenario(app, pilot):
        s = await open_session(app, pilot)
        await pilot.press("j", "j", "j", "j")               # g2-1
        await pilot.press("E")
        await wait_until(pilot, lambda: "demo-g3-1" in (s.data.index if s.data else {}))
        await wait_until(pilot, lambda: app.backend.ws.status("demo-g3-1").measurement is not None)
    run_app(backend, scenario)
    with Workspace.open(demo) as ws:
        rec = ws.resolve("demo-g3-1")
        assert rec.proposer == "human" and rec.parents == ("demo-g2-1",) and rec.rationale == "tuned by hand"
        assert "hand tuned" in ws.files("demo-g3-1").files["kernel.cu"]
        assert ws.best("demo").id == "demo-g3-1"


def test_edit_without_editor_says_why(demo):
    async def scenario(app, pilot):
        await open_session(app, pilot)
        await pilot.press("E")
        await pilot.pause()
        assert any("EDITOR" in n.message for n in app._notifications)
    run_app(fake_backend(demo, env={}), scenario)


def test_export_writes_package_and_notes_it(demo, tmp_path):
    out = tmp_path / "pkg"

    async def scenario(app, pilot):
        await open_session(app, pilot)
        await pilot.press("j", "X")                         # export g1-1
        await wait_until(pilot, lambda: type(app.screen).__name__ == "ExportScreen")
        field = app.screen.query_one("#ex-out")
        field.value = ""
        await type_text(pilot, str(out))
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: (out / "pyproject.toml").is_file())
        await wait_until(pilot, lambda: any(e.event == "exported" for e in app.backend.ws.status("demo-g1-1").events))
    run_app(fake_backend(demo), scenario)
    assert (out / "setup.py").is_file() and (out / "src" / "kbench_gelu_bias" / "export.json").is_file()
    with Workspace.open(demo) as ws:
        ev = [e for e in ws.status("demo-g1-1").events if e.event == "exported"][0]
        assert ev.data["out"] == str(out.resolve()) and ev.data["forced"] is False


def test_export_refused_for_failing_candidate_unless_forced(demo, tmp_path):
    out = tmp_path / "pkg2"

    async def scenario(app, pilot):
        await open_session(app, pilot)
        await pilot.press("j", "j", "X")                    # g1-2 fails correctness
        await wait_until(pilot, lambda: type(app.screen).__name__ == "ExportScreen")
        assert "Not passing" in screen_text(app)
        app.screen.query_one("#ex-out").value = str(out)
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: "Export refused" in str(app.screen.query_one("#ex-error").render()))
        assert type(app.screen).__name__ == "ExportScreen"      # still open, to tick force
        assert not (out / "pyproject.toml").exists()
    run_app(fake_backend(demo), scenario)


def test_reevaluate_through_a_process_pool_inside_the_app(demo):
    """The local executor's compile pool (spawned processes) made from inside the running app: Textual's
    stderr capture has no file descriptor, which multiprocessing's resource tracker used to trip over."""
    from tests.doubles.evaluator import fake_build, fake_gpu
    from engine.evolve.local_executor import LocalPipelineExecutor
    from engine.pipeline.eval_types import EvalOptions
    from kbench_tui.backend import Backend

    def factory(task, direction):
        return LocalPipelineExecutor(task, direction, EvalOptions(), gpus=[None], build_workers=1,
                                     build_fn=fake_build, gpu_fn=fake_gpu)

    backend = Backend(demo, evaluator_factory=factory, gpus=[], env={})

    async def scenario(app, pilot):
        s = await open_session(app, pilot)
        await pilot.press("j", "e")                          # g1-1
        await wait_until(pilot, lambda: "re-evaluated demo-g1-1" in "\n".join(s.query_one("#log").lines_written),
                         timeout=60)
        log = "\n".join(s.query_one("#log").lines_written)
        assert "re-evaluated demo-g1-1: 1.800x" in log and "failed" not in log, log
        assert len(app.backend.ws.status("demo-g1-1").measurements) == 2
    run_app(backend, scenario)


def test_reevaluation_without_a_gpu_says_so_and_writes_nothing(demo):
    """An executor on a machine without a GPU hands back `infra_error=NO_GPU` (the sandbox found none): the log
    says so instead of repeating the old measurement, and the candidate's notes are left as they were."""
    from concurrent.futures import Future

    from engine.evolve.outcome import EvalOutcome
    from engine.gpu_wait import NO_GPU
    from engine.verdict import Status, Verdict
    from kbench_tui.backend import Backend

    class NoGpu:
        def submit(self, candidate, on_stage=None):
            f = Future()
            f.set_result(EvalOutcome([Verdict("compile", Status.PASS, "compiled")], infra_error=NO_GPU))
            return f

        def close(self, wait=True):
            pass

    with Workspace.open(demo) as ws:
        before = ws.status("demo-g0-1")
    backend = Backend(demo, evaluator_factory=lambda t, d: NoGpu(), gpus=[], env={})

    async def scenario(app, pilot):
        s = await open_session(app, pilot)
        await pilot.press("e")                               # g0-1, measured 1.25x before (FakeGPU)
        await wait_until(pilot, lambda: "re-evaluated demo-g0-1" in "\n".join(s.query_one("#log").lines_written))
        log = "\n".join(s.query_one("#log").lines_written)
        assert f"re-evaluated demo-g0-1: not re-measured, still waiting for a GPU: {NO_GPU}" in log, log
        assert "1.250x" not in log.split("re-evaluated demo-g0-1")[1]
    run_app(backend, scenario)
    with Workspace.open(demo) as ws:
        after = ws.status("demo-g0-1")
        assert after.measurements == before.measurements and after.events == before.events
        assert after.stages == before.stages


def test_fitness_plot_sparklines_and_their_empty_states():
    """The plot is Textual's Sparkline: one column per generation; no generations, or nothing measured, say so."""
    import asyncio

    from textual.app import App
    from textual.widgets import Sparkline

    from kbench_tui.view_models import GenerationStat
    from kbench_tui.widgets.fitness_plot import FitnessPlot, series

    assert series([1.5, None, 2.0]) == [1.5, 1.5, 2.0]      # unmeasured: drawn at the bottom of the line
    assert series([None, None]) == [0.0, 0.0]

    class PlotApp(App):
        def compose(self):
            yield FitnessPlot(id="plot")

    async def main():
        app = PlotApp()
        async with app.run_test(size=(80, 5)) as pilot:
            plot = app.query_one(FitnessPlot)
            plot.set_stats([])
            await pilot.pause()
            assert "no generations yet" in screen_text(app)
            plot.set_stats([GenerationStat(0, 1, None, None), GenerationStat(1, 2, None, None)])
            await pilot.pause()
            assert "g0..g1: nothing measured yet" in screen_text(app)
            plot.set_stats([GenerationStat(0, 1, 1.0, 1.0), GenerationStat(1, 2, None, None),
                            GenerationStat(2, 2, 2.0, 1.5)])
            await pilot.pause()
            text = screen_text(app)
            assert "best   ▁▁█  2.00x overall  (1.00x–2.00x)" in text, text
            assert "median ▁▁█  1.50x latest  (1.00x–1.50x)" in text, text
            assert "g0…g2" in text and "nothing measured" not in text
            assert plot.query_one("#best-line", Sparkline).data == [1.0, 1.0, 2.0]
    asyncio.run(main())
