"""What the model is told, as a user's session sends it: the machine (GPU, measured roofline, CUDA toolkit,
runtime and driver), the task's cost model with each config's work, the parent's times against the physical
floor, and no path of the user's machine: not the home folder, the cache, the Python environment kbench is
installed in, nor the task's folder. Read from the requests the Messages API stand-in received."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import HAS_GPU
from tests.paths import REPO
from tests.standins.scripted import ScriptedModel


def _text(body: dict) -> str:
    """Everything a request tells the model: system, messages and the tool."""
    parts = [b.get("text", "") for b in body.get("system") or ()]
    for m in body["messages"]:
        parts += [b.get("text", "") for b in m["content"]] if isinstance(m["content"], list) else [m["content"]]
    return "\n".join(parts) + json.dumps(body.get("tools"))


def _tool(req) -> str:
    return req.json["tools"][0]["name"]


@pytest.mark.slow
def test_every_prompt_tells_the_machine_and_the_cost_model_and_no_path_of_the_users(user, claude):
    task = user.home / "tasks" / "gelu_bias"          # a task of the user's own, in their home
    shutil.copytree(REPO / "tasks" / "gelu_bias", task)
    claude.respond(ScriptedModel(verdict="fail"))      # the verifiers reject every proposal: nothing more compiles
    out = user.run("evolve", str(task), "--proposer", "anthropic", "--generations", "1", "--population", "2",
                   timeout=900)
    posts = claude.messages()
    assert claude.rejected == [] and posts, out.stdout + out.stderr
    assert {"submit_kernel", "submit_verdict"} <= {_tool(r) for r in posts}
    private = {"home": str(user.home), "cache": user.env["XDG_CACHE_HOME"], "python environment": sys.prefix,
               "kbench's own folder": str(REPO)}
    for r in posts:
        text = _text(r.json)
        # the machine: without a GPU, said plainly; the toolkit and the runtime it was found with
        if HAS_GPU:
            assert re.search(r"- measured roofline (of this GPU|: not measured on this GPU yet)", text), _tool(r)
            assert re.search(r"- CUDA: nvcc \d+\.\d+\S*, PyTorch built with CUDA \d+\.\d+, driver \d", text)
        else:
            assert "- measured roofline: unknown here (no GPU is visible where this session runs)" in text, _tool(r)
            assert re.search(r"- CUDA: nvcc \d+\.\d+\S*, PyTorch built with CUDA \d+\.\d+, driver unknown here",
                             text)
        # the cost model: the task's formulas and each config's work
        assert "FLOPs per call: `15 * rows * hidden`; minimum bytes moved: `dtype_bytes * (2 * rows * hidden " \
               "+ hidden)` (dtype_bytes = 4)" in text, _tool(r)
        assert "- `bench`: 503 MFLOP, 268 MB, 1.87 FLOP/byte" in text
        raw = r.body.decode()
        for what, path in private.items():
            assert path not in raw, f"a {_tool(r)} request quotes the {what} ({path})"
        assert "-isystem" not in text


@pytest.mark.slow
def test_the_parent_is_placed_against_the_roofline_measured_for_its_gpu(user, claude):
    # the roofline `kbench roofline` cached for the GPU the parent was measured on (the fake evaluator's)
    cache = user.home / ".cache"
    user.env["XDG_CACHE_HOME"] = str(cache)
    (cache / "kbench" / "roofline").mkdir(parents=True)
    (cache / "kbench" / "roofline" / "FakeGPU.json").write_text(json.dumps(
        {"gpu": "FakeGPU", "copy_gbps": 4000.0, "fp32_tflops": 60.0, "tf32_tflops": 400.0, "measured_at": 0.0}))
    claude.respond(ScriptedModel())
    out = user.run("evolve", "gelu_bias", "--proposer", "anthropic", "--generations", "1",
                   "--population", "2", "--operators", "mutate=1", timeout=300, fake_evaluator=True)
    assert out.returncode == 0, out.stdout + out.stderr
    mutations = [_text(r.json) for r in claude.messages() if "# Operator: mutate" in _text(r.json)]
    assert mutations, out.stdout
    for text in mutations:
        assert "Measured on FakeGPU:" in text
        # bench moves 268,451,840 bytes: 0.0671 ms at 4000 GB/s (its FLOPs take 0.0038 ms at 400/3 TFLOP/s)
        row = next(line for line in text.splitlines() if line.startswith("| bench |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        ms, floor, share = float(cells[1]), float(cells[2]), cells[3]
        assert floor == pytest.approx(0.0671, abs=1e-4), row
        assert share == f"{floor / ms:.0%} (memory-bound)", row
        assert "measured roofline (copy 4000 GB/s; fp32 60.0 TFLOP/s on the CUDA cores, tf32 400.0 TFLOP/s" in text
    reviews = [_text(r.json) for r in claude.messages() if _tool(r) == "submit_verdict"]
    assert reviews and all("## Target" in t and "- GPU: " in t for t in reviews)


@pytest.mark.gpu
@pytest.mark.slow
def test_on_a_gpu_the_prompts_carry_its_measured_roofline_and_the_judges_placement(user, claude):
    user.env["XDG_CACHE_HOME"] = str(user.home / ".cache")       # the roofline this user measured, nobody else's
    measured = user.run("roofline", "--json", timeout=600)
    assert measured.returncode == 0, measured.stdout + measured.stderr
    peaks = json.loads(measured.stdout)
    claude.respond(ScriptedModel())
    out = user.run("evolve", "gelu_bias", "--proposer", "anthropic", "--generations", "1", "--population", "2",
                   "--operators", "mutate=1", timeout=1800)
    text = out.stdout + out.stderr
    posts = claude.messages()
    assert claude.rejected == [] and posts, text
    line = f"- measured roofline of this GPU (`kbench roofline`): copy {peaks['copy_gbps']:.0f} GB/s"
    assert all(line in _text(r.json) for r in posts), text
    assert all(re.search(r"driver \d", _text(r.json)) for r in posts)
    mutations = [_text(r.json) for r in posts if "# Operator: mutate" in _text(r.json)]
    assert mutations, text
    for m in mutations:     # the baseline, timed by the judge, placed against the floor on this GPU's roofline
        row = next(x for x in m.splitlines() if x.startswith("| bench |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[2]) > 0 and cells[3].endswith("(memory-bound)"), row
