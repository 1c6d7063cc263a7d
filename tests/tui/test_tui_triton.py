"""The app shows and diffs a Triton candidate: kernel.py first, highlighted as Python, its generated binding.py
after it, and the diff against its parent naming the changed block size. Headless, a workspace of a session
whose candidates are Triton ones, the fake evaluator."""

from __future__ import annotations

from pathlib import Path

from rich.syntax import Syntax

from engine.candidates import load_candidate
from engine.proposers.knobs import apply_settings
from engine.tasks.glue.generated import materialise
from engine.tasks.loader import load_task
from engine.workspace import Workspace
from tests.doubles.tui import fake_backend, run_app, screen_text, wait_until
from kbench_tui.widgets.code_view import CodeView, render_files
from tests.paths import FIXTURES


def _triton_workspace(path: Path) -> None:
    ws = Workspace.create(path)
    task = load_task("llama_rmsnorm")
    ws.start_session("tri", task, proposer="tuner")
    base = materialise(load_candidate(FIXTURES / "triton" / "llama_rmsnorm_forward"), task, "forward")
    b = ws.commit_candidate("tri", base, operator="baseline", proposer="baseline", generation=0,
                            title="triton rows", rationale="two passes per row", prompt="(baseline)\n")
    tuned = apply_settings(base, {"BLOCK_H": "2048"})
    ws.commit_candidate("tri", tuned, parents=[b.id], operator="tune", title="BLOCK_H 1024 -> 2048",
                        rationale="knobs: BLOCK_H 1024 -> 2048")
    ws.close()


def test_the_code_view_puts_kernel_py_first_and_highlights_it_as_python():
    files = {"binding.py": "import torch\n", "kernel.py": "import triton\n"}
    parts = [r for r in render_files(files).renderables if isinstance(r, Syntax)]
    assert [p.code for p in parts] == ["import triton\n", "import torch\n"]
    assert all(type(p.lexer).__name__ == "PythonLexer" for p in parts), [type(p.lexer) for p in parts]


def test_a_triton_candidate_is_shown_and_diffed_against_its_parent(tmp_path):
    _triton_workspace(tmp_path / "ws")

    async def scenario(app, pilot):
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "SessionScreen"
                         and getattr(app.screen, "loaded", False))
        await pilot.press("j", "enter")
        await wait_until(pilot, lambda: getattr(app.screen, "loaded", False))
        text = screen_text(app)
        assert "kernel.py" in text and "@triton.jit" in text, text
        assert "binding.py" not in text.split("kernel.py")[0]
        code = app.screen.query_one(CodeView)
        assert code is not None
        await pilot.press("d")
        await pilot.pause()
        text = screen_text(app)
        assert "-    BLOCK_H = 1024" in text and "+    BLOCK_H = 2048" in text, text
    run_app(fake_backend(tmp_path / "ws"), scenario)
