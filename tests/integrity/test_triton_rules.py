"""The static rules on Triton candidates with their task (engine/integrity/triton_scan.py through scan_candidate):
what the task's dtype and signature change, the generated binding left alone and an edited one read, and the
verdict a Triton hack gets before any compile. The corpus (tests/integrity/test_static_corpus.py) holds one file
per catalogued Triton hack and the honest styles."""

from __future__ import annotations

import pytest

from engine.candidates import Candidate, load_candidate
from engine.integrity.findings import FAIL, SUSPICIOUS
from engine.integrity.static import check_candidate, scan_candidate
from engine.tasks.glue.generated import materialise
from engine.tasks.loader import load_task
from engine.verdict import Status
from tests.paths import FIXTURES

RMS = (FIXTURES / "triton" / "llama_rmsnorm_forward" / "kernel.py").read_text()


def _cand(text: str, task: str = "llama_rmsnorm", direction: str = "forward") -> tuple[Candidate, object]:
    t = load_task(task)
    return materialise(Candidate("triton", {"kernel.py": text}), t, direction), t


def _hits(text: str, task: str = "llama_rmsnorm", policy: str = "pure") -> set[tuple[str, str, str]]:
    cand, t = _cand(text, task)
    return {(f.hack, f.status, f.file) for f in scan_candidate(cand, t, policy)}


def test_the_honest_fixture_and_its_generated_binding_have_no_finding():
    assert _hits(RMS) == set()
    assert _hits(RMS, policy="engineering") == set()


def test_an_edited_binding_is_read_by_the_same_rules():
    cand, task = _cand(RMS)
    edited = cand.files["binding.py"].replace("    return y", "    return torch.nn.functional.relu(y)")
    assert edited != cand.files["binding.py"]
    found = scan_candidate(Candidate("triton", {**cand.files, "binding.py": edited}), task)
    assert [(f.hack, f.status, f.file) for f in found] == [("torch-compute", FAIL, "binding.py")]


def test_a_cast_below_the_task_dtype_depends_on_the_task():
    to_half = RMS.replace("x = tl.load(x_row + cols, mask=mask, other=0.0)",
                          "x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.bfloat16)")
    assert ("lower-precision", FAIL, "kernel.py") in _hits(to_half)
    widened = RMS.replace("x = tl.load(x_row + cols, mask=mask, other=0.0)",
                          "x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)")
    assert _hits(widened) == set()
    cast = RMS.replace("acc += x * x", "acc += tl.cast(x, tl.float16) * x")
    assert ("lower-precision", FAIL, "kernel.py") in _hits(cast)


def test_a_cache_keyed_on_a_shape_is_a_configuration_but_one_keyed_on_an_input_is_a_result():
    shape_keyed = RMS.replace("def kb_forward(x, w, eps, y, B, S, H):\n",
                              "_CFG = {}\n\n\ndef kb_forward(x, w, eps, y, B, S, H):\n    _CFG[H] = 1024\n")
    assert _hits(shape_keyed) == set()
    replay = RMS.replace("def kb_forward(x, w, eps, y, B, S, H):\n",
                         "_OUT = {}\n\n\ndef kb_forward(x, w, eps, y, B, S, H):\n    _OUT[H] = y\n")
    assert ("static-cache", FAIL, "kernel.py") in _hits(replay)
    rebound = RMS.replace("def kb_forward(x, w, eps, y, B, S, H):\n",
                          "_LAST = None\n\n\ndef kb_forward(x, w, eps, y, B, S, H):\n    global _LAST\n    _LAST = y\n")
    assert ("static-cache", FAIL, "kernel.py") in _hits(rebound)


def test_tl_dot_without_input_precision_is_suspicious_in_a_float32_task():
    dot = RMS.replace("acc += x * x", "acc += tl.sum(tl.dot(x[:, None], x[None, :]), axis=0)")
    assert ("lower-precision", SUSPICIOUS, "kernel.py") in _hits(dot)
    ieee = dot.replace("x[None, :])", "x[None, :], input_precision=\"ieee\")")
    assert _hits(ieee) == set()


def test_a_launcher_that_only_calls_torch_fails_pure_with_no_kernel_of_its_own():
    text = "import torch\n\n\ndef kb_forward(x, w, eps, y, B, S, H):\n" \
           "    y.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w)\n"
    hits = _hits(text)
    assert ("torch-compute", FAIL, "kernel.py") in hits and ("no-own-kernel", SUSPICIOUS, "kernel.py") in hits
    cand, task = _cand(text)
    v = check_candidate(cand, task, "pure")
    assert v.status == Status.FAIL and "torch-compute" in v.reason


@pytest.mark.parametrize("line, rule", [
    ("import threading", "host-thread"),
    ("torch.backends.cuda.matmul.allow_tf32 = True", "monkey-patch"),
    ("s = torch.cuda.Stream()", "side-stream"),
])
def test_the_python_rules_of_every_candidate_apply(line, rule):
    text = RMS.replace("import triton\n", f"import torch\nimport triton\n{line}\n", 1)
    assert rule in {h for h, _, _ in _hits(text)}


def test_the_builtin_fixture_folder_loads_and_passes_the_static_gate():
    task = load_task("llama_rmsnorm")
    cand = materialise(load_candidate(FIXTURES / "triton" / "llama_rmsnorm_forward"), task, "forward")
    assert check_candidate(cand, task).status == Status.PASS
