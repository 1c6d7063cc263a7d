"""What the prompts say about the machine and the roofline (engine.llm.target, engine.llm.render), and that
they quote no path of the user's machine (engine.llm.redact)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.paths import LLM_FIXTURES

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import parent_candidate  # noqa: E402

from engine.config.load import load_config  # noqa: E402
from engine.harness.roofline import Peaks  # noqa: E402
from engine.llm import render  # noqa: E402
from engine.llm.client import LLMClient  # noqa: E402
from engine.llm.prompts import load_template  # noqa: E402
from engine.llm.redact import machine_paths, without_paths  # noqa: E402
from engine.llm.target import TargetInfo, flags_without_paths  # noqa: E402
from engine.proposers.anthropic import LLMProposer  # noqa: E402
from engine.proposers.base import ProposalRequest  # noqa: E402
from engine.tasks.loader import load_task  # noqa: E402
from engine.workspace import ConfigTiming, Measurement  # noqa: E402

H200 = Peaks(gpu="NVIDIA H200", copy_gbps=4100.0, fp32_tflops=51.2, tf32_tflops=380.0, measured_at=0.0)


def test_a_known_gpu_is_described_with_its_roofline_and_versions():
    t = TargetInfo(gpu="NVIDIA H200", capability="9.0", sms=132, memory_gb=139.8, archs=("9.0a",),
                   nvcc_flags=("-O3",), nvcc_version="13.0.88", cuda_runtime="13.0", driver="580.95.05", peaks=H200)
    text = t.describe()
    assert ("- measured roofline of this GPU (`kbench roofline`): copy 4100 GB/s; fp32 51.2 TFLOP/s on the CUDA "
            "cores, tf32 380.0 TFLOP/s on the tensor cores (fp32-accurate 3xTF32 at most 126.7); ridge point 30.9 "
            "FLOP/byte at fp32 accuracy") in text
    assert "- CUDA: nvcc 13.0.88, PyTorch built with CUDA 13.0, driver 580.95.05" in text
    unmeasured = TargetInfo(gpu="NVIDIA H200", driver="580.95.05").describe()
    assert "- measured roofline: not measured on this GPU yet (`kbench roofline` measures it" in unmeasured
    nothing = TargetInfo(nvcc_version="13.0.88").describe()
    assert "- measured roofline: unknown here (no GPU is visible where this session runs)" in nothing
    assert "- CUDA: nvcc 13.0.88, driver unknown here (no GPU visible)" in nothing


def test_nvcc_flags_lose_every_folder_they_name():
    home = str(Path.home())
    flags = ["-O3", "-std=c++17", "-ccbin", "/usr/bin/g++-13", "-D_GLIBCXX_USE_CXX11_ABI=1",
             "-gencode=arch=compute_90a,code=sm_90a", "-isystem", f"{home}/.venv/site-packages/nvidia/cu13/include",
             f"-I{home}/include", "--expt-relaxed-constexpr"]
    assert flags_without_paths(flags, "/usr/bin/g++-13") == (
        "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr")


def test_paths_of_the_machine_are_named_not_quoted(tmp_path, monkeypatch):
    home, cache = tmp_path / "alice", tmp_path / "alice" / ".cache" / "kb"
    task = home / "tasks" / "gelu"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KBENCH_CACHE", str(cache))
    paths = machine_paths(task)
    text = (f"{cache}/builds/ab/kernel.cu(3): error\nreference unreadable: {task}/reference.py\n"
            f"see {home}/notes.txt; {home}2/x stays; /home/bob/src/k.cu and /Users/carol/k.cu")
    out = without_paths(text, paths)
    assert out == ("<kbench cache>/builds/ab/kernel.cu(3): error\nreference unreadable: <task folder>/reference.py\n"
                   f"see <home>/notes.txt; {home}2/x stays; <home>/src/k.cu and <home>/k.cu")
    if sys.prefix != sys.base_prefix:
        assert without_paths(f"{sys.prefix}/lib/x.h", paths) == "<python environment>/lib/x.h"


def test_the_context_carries_the_cost_model():
    ctx = load_template("context").render(render.context_values(load_task("gelu_bias"), "backward"))
    assert ("- FLOPs per call: `25 * rows * hidden`; minimum bytes moved: `dtype_bytes * (3 * rows * hidden + "
            "2 * hidden)` (dtype_bytes = 4)") in ctx
    assert "- `bench`: 839 MFLOP, 403 MB, 2.08 FLOP/byte" in ctx
    assert "A measured time below the floor is held as\nsuspicious" in ctx


def _measured(gpu: str) -> Measurement:
    return Measurement(1.5, 1.2, (ConfigTiming("bench", 0.1342, 0.001, 0.2, 0.16),
                                  ConfigTiming("odd-small", 0.01, 0.001, 0.02, 0.02)), gpu=gpu)


def test_the_parents_times_are_placed_against_the_judges_floor():
    task = load_task("gelu_bias")
    judged = {"peaks": {"gpu": "NVIDIA H200", "copy_gbps": 4000.0, "fp32_tflops": 60.0, "tf32_tflops": 400.0},
              "configs": {"bench": {"floor_ms": 0.0671}}}
    text = render.render_timings(_measured("NVIDIA H200"), task, "forward", judged)
    assert "| bench | 0.1342 | 0.0671 | 50% (memory-bound) | 0.2000 | 1.49x | 0.1600 | 1.19x |" in text
    # a config the judge did not place is placed from the task's cost model on the same peaks
    assert "| odd-small | 0.0100 | 0.0001 | 1% (memory-bound) |" in text
    assert "measured roofline (copy 4000 GB/s;" in text


def test_without_a_placement_the_roofline_cached_for_the_measuring_gpu_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path))
    task = load_task("gelu_bias")
    missing = render.render_timings(_measured("NVIDIA H200"), task)
    assert "| bench | 0.1342 | - | - |" in missing
    assert "No roofline is measured for NVIDIA H200 here (`kbench roofline` on it measures one)" in missing
    (tmp_path / "roofline").mkdir()
    (tmp_path / "roofline" / "NVIDIA_H200.json").write_text(json.dumps(H200.__dict__))
    placed = render.render_timings(_measured("NVIDIA H200"), task)
    floor = 268451840 / 4100e9 * 1e3
    assert f"| bench | 0.1342 | {floor:.4f} | {floor / 0.1342:.0%} (memory-bound) |" in placed


@pytest.mark.parametrize("op", ["translate", "mutate", "crossover", "repair", "meta"])
def test_no_rendered_prompt_quotes_a_path_of_the_machine(op, layernorm, tmp_path, monkeypatch):
    """Every operator's prompt, with the task's folder, the cache and the home folder in its inputs."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KBENCH_CACHE", str(home / ".cache" / "kbench"))
    cfg = load_config(user_file=tmp_path / "none.toml", env={})
    prop = LLMProposer(LLMClient(cfg.llm, api_key="k", env={}), cfg, target=TargetInfo(note="test").describe())
    task = replace(layernorm, root=home / "tasks" / "layernorm")
    feedback = f"{home}/.cache/kbench/builds/x/kernel.cu(3): error: nope; {task.root}/reference.py"
    parents = {"translate": (), "meta": (), "crossover": (parent_candidate("a"), parent_candidate("b"))}
    req = ProposalRequest(task=task, operator=op, direction="forward",
                          parents=parents.get(op, (parent_candidate(),)), feedback=feedback,
                          lessons=(f"failed: {home}/x.cu",), population=f"best: {home}/y")
    llm = prop.build_request(req)
    for text in (llm.system, llm.context, llm.prompt):
        assert str(home) not in text and str(tmp_path) not in text
