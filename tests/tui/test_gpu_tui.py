"""The app against a real GPU: re-evaluate a candidate from the session screen with the default evaluator
(the pipelined local executor: nvcc in a CPU worker, the sandboxed check + time on the GPU), and start a
tuner session from the new-session form. What the engine recorded is checked afterwards."""

from __future__ import annotations

import pytest

from engine.candidates import load_candidate
from engine.tasks.loader import load_task
from engine.workspace import Workspace
from kbench_tui.backend import Backend
from tests.doubles.tui import run_app, screen_text, type_text, wait_until

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _real_backend(path, profile: bool):
    """The app's own backend with its default (configured) evaluator; the workspace config keeps the run
    short: eager baseline only, timing on the `bench` config (correctness still on every config)."""
    Workspace.create(path).close()
    cfg = path / ".kbench" / "config.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(f'[eval]\ncompile_baseline = false\ntiming_configs = ["bench"]\nprofile = {str(profile).lower()}\n')
    b = Backend(path, env={})
    assert b.gpus(), "a GPU test needs a visible GPU"
    return b


def test_reevaluate_on_the_gpu_records_a_real_measurement(tmp_path):
    import torch
    gpu = torch.cuda.get_device_name(0)
    task = load_task("gelu_bias")
    backend = _real_backend(tmp_path / "ws", profile=True)
    ws = backend.ws
    ws.start_session("gpu", task, proposer="tuner")
    rec = ws.commit_candidate("gpu", load_candidate(task.baseline_dir("forward")), operator="baseline",
                              proposer="baseline", generation=0, title="the task's baseline")

    async def scenario(app, pilot):
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen"
                         and getattr(app.screen, "loaded", False))
        s = app.screen
        assert s.current_candidate() == rec.id
        await pilot.press("e")
        await wait_until(pilot, lambda: app.backend.queued >= 1)
        await wait_until(pilot, lambda: app.backend.queued == 0, timeout=600)
        await wait_until(pilot, lambda: f"re-evaluated {rec.id}" in "\n".join(s.query_one("#log").lines_written))
        log = "\n".join(s.query_one("#log").lines_written)
        await pilot.press("enter")                                       # the candidate's detail
        await wait_until(pilot, lambda: type(app.screen).__name__ == "CandidateScreen")
        await pilot.press("v")                                           # verdicts tab
        await wait_until(pilot, lambda: gpu in screen_text(app), timeout=20)
        return log, screen_text(app)

    log, text = run_app(backend, scenario)
    print(text)
    assert f"re-evaluate {rec.id}: compile pass" in log, log
    with Workspace.open(tmp_path / "ws") as ws:
        st = ws.status(rec.id)
        assert st.status_of("correctness").value == "pass", st.stages
        m = st.measurement
        assert m is not None and m.gpu == gpu and m.speedup_eager and m.speedup_eager > 0
        assert [c.config for c in m.configs] == ["bench"]          # [eval] timing_configs
        assert st.status_of("correctness").value == "pass" and str(len(task.configs)) in st.stages["correctness"].reason
        assert any(e.event == "reevaluated" and e.data.get("gpu") == gpu for e in st.events)
        prof = st.stages.get("profile")
        assert prof is not None and prof.status.value in ("pass", "skipped"), st.stages
        if prof.status.value == "pass":
            assert "memory-bound" in prof.reason     # gelu_bias is an elementwise, memory-bound op


def test_new_tuner_session_runs_on_the_gpu(tmp_path):
    backend = _real_backend(tmp_path / "ws", profile=False)

    async def scenario(app, pilot):
        t = app.screen.query_one("#tasks")
        t.focus()
        while t.get_row_at(t.cursor_row)[0] != "gelu_bias":
            await pilot.press("j")
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "NewSessionScreen")
        f = app.screen
        f.query_one("#ns-proposer").value = "tuner"
        f.query_one("#ns-generations").value = "1"
        f.query_one("#ns-population").value = "2"
        f.query_one("#ns-name").focus()
        await type_text(pilot, "gpu-tuner")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen")
        es = app.backend.runner("gpu-tuner")
        await wait_until(pilot, lambda: not es.running, timeout=600)
        s = app.screen
        await wait_until(pilot, lambda: s.loaded and len(s.data.views) == 3, timeout=30)
        return es.result, screen_text(app)

    result, text = run_app(backend, scenario)
    assert result is not None and result.completed, result
    assert "gpu-tuner-g1-2" in text or "g1-2" in text, text
    with Workspace.open(tmp_path / "ws") as ws:
        views = ws.candidates("gpu-tuner")
        assert len(views) == 3 and views[0].record.operator == "baseline"
        assert views[0].status.measurement is not None and views[0].status.measurement.gpu
        best = ws.best("gpu-tuner")
        assert best is not None and best.speedup >= views[0].speedup
