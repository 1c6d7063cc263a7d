"""`kbench report` on a workspace built in the test: validity by stage, speedups, fast_p, generations,
LLM usage and time, the markdown and the PNG beside it (drawn with matplotlib, the `plot` extra; the test extra
installs it, and a test without it checks that the report says how to get the plot)."""

from __future__ import annotations

import struct
import sys

import pytest

from engine.cli import main as cli_main
from engine.llm.verifiers import aggregate
from engine.profile.session_report import BEST_COLOR, MEDIAN_COLOR, PLOT_NEEDS, build_report, to_markdown, write_report
from engine.verdict import Status, Verdict
from engine.workspace import ConfigTiming, Measurement, Workspace
from tests.conftest import cand


def measure(speedup: float, compile_: float) -> Measurement:
    return Measurement(speedup, compile_, (ConfigTiming("c", 1.0, 0.01, speedup, compile_),), gpu="NVIDIA H100")


PASS = {s: Verdict(s, Status.PASS, "ok") for s in ("static", "compile", "correctness", "timing")}


@pytest.fixture
def ws_path(tmp_path, layernorm_task):
    task = layernorm_task
    path = tmp_path / "ws"
    ws = Workspace.create(path)
    ws.start_session("ln", task, proposer="anthropic", model="claude-test")
    usage = {"input_tokens": 1000, "output_tokens": 200, "cache_write_tokens": 0, "cache_read_tokens": 500}

    def add(tag, gen, speedup=None, compile_=None, fail=None, operator="mutate", cost=0.01):
        meta = {"usage": usage, "cost_usd": cost} if cost else {}
        rec = ws.commit_candidate("ln", cand(tag, **meta), generation=gen, operator=operator)
        verdicts = []
        for stage, v in PASS.items():
            if fail == stage:
                verdicts.append(Verdict(stage, Status.FAIL, "broken"))
                break
            verdicts.append(v)
        ws.record_verdicts(rec.id, verdicts)
        if speedup is not None:
            ws.record_measurement(rec.id, measure(speedup, compile_))
        ws.record_event(rec.id, "evaluated", {"speedup": speedup, "seconds": 10.0, "build_s": 6.0, "gpu_s": 3.0})
        return rec

    add("base", 0, 1.0, 0.8, operator="baseline", cost=0)
    add("a", 1, 1.2, 0.9)
    add("b", 1, fail="compile")
    add("c", 1, 1.6, 1.1)
    add("d", 2, fail="correctness")
    add("e", 2, 2.5, 1.9)
    f = add("f", 2, 0.7, 0.5)
    ws.record_event(f.id, "directives", {"directives": "vectorise", "cost_usd": 0.05})
    ws.record_verdict(f.id, Verdict("profile", Status.SKIPPED, "ncu (Nsight Compute) not found on PATH",
                                    {"seconds": 4.5, "text": "Profile: no ncu data"}))
    ws.close()
    return path


def test_report_figures(ws_path):
    ws = Workspace.open(ws_path)
    rep = build_report(ws, "ln")
    ws.close()
    assert rep.proposed == 6 and rep.baseline == ["ln-g0-1"] and rep.eligible == 4
    assert rep.stage_counts["static"] == {"reached": 6, "passed": 6}
    assert rep.stage_counts["compile"] == {"reached": 6, "passed": 5}
    assert rep.stage_counts["correctness"] == {"reached": 5, "passed": 4}
    assert rep.best_eager == 2.5 and rep.best_compile == 1.9
    assert sorted(rep.speedups_eager) == [0.7, 1.2, 1.6, 2.5]
    assert rep.fast_p[0.0] == pytest.approx(4 / 6)
    assert rep.fast_p[1.0] == pytest.approx(3 / 6)
    assert rep.fast_p[1.5] == pytest.approx(2 / 6)
    assert rep.fast_p[2.0] == pytest.approx(1 / 6)
    assert rep.fast_p_compile[1.0] == pytest.approx(2 / 6)
    gens = {g["generation"]: g for g in rep.generations}
    assert gens[0]["best_so_far"] == 1.0
    assert gens[1]["best"] == 1.6 and gens[1]["median"] == pytest.approx(1.4) and gens[1]["best_so_far"] == 1.6
    assert gens[2]["best"] == 2.5 and gens[2]["median"] == pytest.approx(1.6) and gens[2]["best_so_far"] == 2.5
    assert rep.tokens["input_tokens"] == 6000 and rep.tokens["cache_read_tokens"] == 3000
    assert rep.usd["proposals"] == pytest.approx(0.06) and rep.usd["directives"] == pytest.approx(0.05)
    assert rep.usd["total"] == pytest.approx(0.11)
    assert rep.seconds == {"build": 42.0, "gpu": 21.0, "evaluation": 70.0, "profile": 4.5}
    assert rep.stage_counts["profile"] == {"reached": 1, "passed": 1}
    md = to_markdown(rep)
    assert "| compile | 6 | 5 | 83% |" in md
    assert "| vs eager | 67% | 50% | 33% | 17% |" in md
    assert "| eager | 2.50x | 1.40x | 2.50x |" in md
    assert "$0.1100" in md and "- profile: 4.5 s" in md


def test_report_counts_every_llm_call(ws_path):
    """Verifier votes, directives (on a candidate or, before anything was measured, on the session) and failed
    proposals are calls too: their tokens and dollars are in the totals, each counted once."""
    ws = Workspace.open(ws_path)
    vote_usage = {"input_tokens": 300, "output_tokens": 20, "cache_write_tokens": 100, "cache_read_tokens": 0}
    votes = [Verdict("llm_verify", Status.PASS, f"{n}: pass", {"verifier": n, "usage": vote_usage, "cost_usd": 0.002})
             for n in ("compile", "memory", "numerics")]
    votes.append(Verdict("llm_verify", Status.SKIPPED, "numerics verifier did not answer: 529",
                         {"verifier": "numerics", "error": "overloaded"}))      # no answer: no call billed
    a = next(v for v in ws.candidates("ln") if v.record.operator != "baseline")
    ws.record_verdicts(a.id, votes + [aggregate(votes, 0.7)])
    once = {"input_tokens": 50, "output_tokens": 5, "cache_write_tokens": 0, "cache_read_tokens": 0}
    ws.record_session_event("ln", "directives", {"directives": "- tile", "cost_usd": 0.01, "usage": once})
    ws.record_session_event("ln", "proposal_failed", {"reason": "no tool call", "cost_usd": 0.02, "usage": once})
    rep = build_report(ws, "ln")
    ws.close()
    assert rep.calls == {"proposals": 6, "verifiers": 3, "directives": 2, "failed_proposals": 1, "total": 12}
    assert rep.tokens["input_tokens"] == 6000 + 900 + 100 and rep.tokens["cache_write_tokens"] == 300
    assert rep.tokens["output_tokens"] == 1200 + 60 + 10
    assert rep.usd["verifiers"] == pytest.approx(0.006) and rep.usd["directives"] == pytest.approx(0.06)
    assert rep.usd["total"] == pytest.approx(0.06 + 0.006 + 0.06 + 0.02)
    md = to_markdown(rep)
    assert "- calls: 12 (proposals 6, verifiers 3, directives 2, failed proposals 1)" in md
    assert "- tokens, every call: 7000 in, 1270 out, 300 cache write, 3000 cache read" in md


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    _length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _share_near(pixels, hex_color: str, tol: float = 0.06) -> float:
    """The share of pixels within `tol` of `hex_color` in every channel."""
    rgb = [int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    near = (abs(pixels[:, :, 0] - rgb[0]) < tol) & (abs(pixels[:, :, 1] - rgb[1]) < tol) & \
        (abs(pixels[:, :, 2] - rgb[2]) < tol)
    return float(near.mean())


def test_cli_writes_markdown_and_png(ws_path, tmp_path, capsys):
    image = pytest.importorskip("matplotlib.image")
    out = tmp_path / "out" / "ln.md"
    assert cli_main(["--workspace", str(ws_path), "report", "ln", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "wrote" in printed and "ln.png" in printed and "no plot" not in printed
    assert "![best (red) and median (blue)" in out.read_text() and "(ln.png)" in out.read_text()
    assert "pip install" not in out.read_text()
    png = tmp_path / "out" / "ln.png"
    assert _png_size(png.read_bytes()) == (640, 360)
    pixels = image.imread(png)                      # decodes: height x width x RGBA, floats in 0..1
    assert pixels.shape[:2] == (360, 640)
    # the two lines are drawn in their colours (each a fraction of a percent of the canvas at least)
    assert _share_near(pixels, BEST_COLOR) > 0.002 and _share_near(pixels, MEDIAN_COLOR) > 0.002
    assert _share_near(pixels, "#ffffff") > 0.5     # mostly background
    assert cli_main(["--workspace", str(ws_path), "report", "ln", "--json"]) == 0
    assert '"fast_p"' in capsys.readouterr().out


def test_without_matplotlib_the_report_says_how_to_get_the_plot(ws_path, tmp_path, capsys, monkeypatch):
    # None in sys.modules makes `import matplotlib...` raise ImportError, as where it is not installed
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)
    out = tmp_path / "out" / "ln.md"
    assert cli_main(["--workspace", str(ws_path), "report", "ln", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("pip install 'kbench[plot]'") == 1 and f"(no plot: {PLOT_NEEDS})" in printed
    md = out.read_text()
    assert f"No plot of speedup per generation: {PLOT_NEEDS}." in md and "![" not in md
    assert "## Generations" in md and "| eager | 2.50x | 1.40x | 2.50x |" in md     # the rest of the report
    assert not (tmp_path / "out" / "ln.png").exists()


def test_empty_session_report(tmp_path, layernorm_task):
    ws = Workspace.create(tmp_path / "ws")
    ws.start_session("empty", layernorm_task)
    rep = build_report(ws, "empty")
    ws.close()
    assert rep.proposed == 0 and rep.fast_p[1.0] == 0.0
    written = write_report(rep, tmp_path / "r.md")
    assert written.plot is None and written.no_plot == "no generation has a measured speedup"
    text = written.markdown.read_text()
    assert "(none eligible)" in text and "No plot" not in text     # nothing to plot: nothing to install either
