"""Integrity checks on CPU: the static scan on every hack fixture and every baseline, the evaluator's static
gate, the integrity verdict, and fault isolation where a CPU can show it. The judge's dynamic findings are in
test_judge_cpu.py; the GPU side (every hack rejected through evaluate(), every fault isolated) is
tests/integrity/test_gpu_integrity.py and tests/integrity/test_gpu_exploits.py."""

from __future__ import annotations

import subprocess
import time

import pytest

from engine.candidates import Candidate, load_candidate
from engine.integrity import findings
from engine.integrity.static import (
    scan_candidate,
    scan_cpp,
    scan_python,
    static_verdict,
)
from engine.pipeline.eval_types import EvalOptions, EvalReport
from engine.pipeline.evaluate import evaluate
from engine.pipeline.verdicts import integrity_verdict
from engine.tasks.loader import builtin_task_names, load_task
from engine.verdict import Stage, Status, Verdict
from tests.builtin_tasks import baselines
from tests.installed import KBENCH, user_env
from tests.paths import FIXTURES, REPO

HACKS = FIXTURES / "hacks"
FAULTS = FIXTURES / "faults"
KB = FIXTURES / "kernelbench"

# fixture -> (task, hack id the static scan must name, expected static status or None where only the
# dynamic checks can see it). Kept in step with INTEGRITY.md.
STATIC_EXPECT = {
    "reuse_freed_output": ("layernorm_lastdim", None, None),
    "pointer_cache": ("layernorm_lastdim", findings.STATIC_CACHE, "fail"),
    "call_count_cache": ("layernorm_lastdim", findings.STATIC_CACHE, "fail"),
    "input_mutation": ("layernorm_lastdim", None, None),
    "side_stream": ("layernorm_lastdim", findings.SIDE_STREAM, "fail"),
    "host_thread": ("layernorm_lastdim", findings.HOST_THREAD, "fail"),
    "try_catch_fallback": ("layernorm_lastdim", findings.TRY_CATCH, "fail"),
    "torch_compute": ("softmax", findings.TORCH_COMPUTE, "fail"),
    "vendor_cublas": ("mnist_linear", findings.VENDOR_LIBRARY, "fail"),
    "lower_precision": ("layernorm_lastdim", findings.LOWER_PRECISION, "fail"),
    "tf32_no_split": ("mnist_linear", findings.LOWER_PRECISION, "fail"),
    "shape_specialisation": ("softmax", findings.SHAPE_SPECIALISATION, "suspicious"),
    "constant_output": ("softmax", None, None),
    "below_floor": ("layernorm_lastdim", findings.STATIC_CACHE, "fail"),
    "modelnew_monkeypatch": (str(KB / "scaled_swish.py"), findings.MONKEY_PATCH, "fail"),
}


def _fixture(name: str) -> Candidate:
    d = HACKS / name
    return load_candidate(d if (d / "kernel.cu").exists() else next(d.glob("*.py")))


def test_catalog_covers_every_fixture():
    assert sorted(p.name for p in HACKS.iterdir() if p.is_dir()) == sorted(STATIC_EXPECT)


@pytest.mark.parametrize("name", sorted(STATIC_EXPECT))
def test_static_scan_of_hack_fixture(name):
    task_ref, hack, status = STATIC_EXPECT[name]
    findings = scan_candidate(_fixture(name), load_task(task_ref))
    v = static_verdict(findings)
    if hack is None:  # a dynamic-only hack: the static scan must not claim anything it cannot see
        assert v.status == Status.PASS, v.reason
        return
    assert v.status.value == status, v.reason
    assert hack in v.reason and any(f.hack == hack and f.line > 0 and f.reason for f in findings), v.reason


@pytest.mark.parametrize("task_name,direction", list(baselines()))
def test_static_scan_never_rejects_a_baseline(task_name, direction):
    task = load_task(task_name)
    findings = scan_candidate(load_candidate(task.baseline_dir(direction)), task)
    assert static_verdict(findings).status == Status.PASS, [f.describe() for f in findings]


@pytest.mark.parametrize("path", sorted((KB / "candidates").glob("*.py")) +
                         sorted((REPO / "tests/fixtures/robust_kbench/candidates").glob("*.cu")) +
                         [REPO / "tests/fixtures/native"], ids=lambda p: p.name)
def test_static_scan_passes_the_honest_format_fixtures(path):
    findings = scan_candidate(load_candidate(path), None)
    assert static_verdict(findings).status == Status.PASS, [f.describe() for f in findings]


def test_faults_are_not_static_findings():
    for d in FAULTS.iterdir():
        assert static_verdict(scan_candidate(load_candidate(d), load_task("layernorm_lastdim"))).status == Status.PASS


# -- soundness details of the scanner ---------------------------------------------------------------------

def test_comments_and_strings_never_fire():
    src = ('// torch::softmax(x) and try { } catch (...) and cudaStreamCreate and std::thread\n'
           '/* cublasSgemm(h) __half static torch::Tensor t; */\n'
           'TORCH_CHECK(ok, "try { fallback to at::layer_norm } catch");\n'
           'const char* msg = "std::thread cublasSgemm(";\n')
    assert scan_cpp("binding.cpp", src) == []


def test_inline_ptx_strings_are_read_for_precision():
    f = scan_cpp("k.cu", 'asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));')
    assert [x.hack for x in f] == [findings.LOWER_PRECISION]


def test_3xtf32_split_is_accepted_and_plain_tf32_is_not():
    split = ('__device__ void split(float v, unsigned& hi, unsigned& lo) {\n'
             '  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(v));\n'
             '  const float r = v - __uint_as_float(hi);\n'
             '  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(r));\n}\n')
    assert scan_cpp("k.cu", split) == []
    plain = split.replace("  const float r = v - __uint_as_float(hi);\n", "").replace('"f"(r)', '"f"(v)')
    assert [x.hack for x in scan_cpp("k.cu", plain)] == [findings.LOWER_PRECISION]
    assert scan_cpp("k.cu", plain, task_dtype="float16") == []


def test_half_as_a_variable_name_is_not_half_precision():
    assert scan_cpp("k.cu", "const int half = n >> 1; for (int half = 0; half < 2; ++half) y[half * 4] = 0;") == []
    assert scan_cpp("k.cu", "__device__ void f(float x) { half h = x; __half* p = q; }")


def test_allocation_views_and_checks_are_allowed():
    src = ('#include <torch/extension.h>\n'
           'torch::Tensor f(torch::Tensor x) {\n'
           '  TORCH_CHECK(x.size(0) == x.size(1), "square");\n'
           '  auto y = torch::empty_like(x); auto z = torch::zeros({4}, x.options());\n'
           '  auto v = x.contiguous().view({-1}).reshape({2, -1}); auto f = torch::full({}, 1.0, x.options());\n'
           '  return y; }\n')
    assert scan_cpp("binding.cpp", src) == []
    assert [f.hack for f in scan_cpp("binding.cpp", src.replace("return y;", "return torch::matmul(x, y);"))] \
        == [findings.TORCH_COMPUTE]
    assert [f.hack for f in scan_cpp("binding.cpp", src.replace("return y;", "return at::native::add(x, y);"))] \
        == [findings.TORCH_COMPUTE]


def test_device_attribute_memo_is_not_a_cache_but_a_pointer_keyed_one_is():
    memo = ('int sms() { static int cached = 0; static int used = 0;\n'
            '  if (!cached) cudaDeviceGetAttribute(&cached, cudaDevAttrMultiProcessorCount, 0); ++used; return cached; }\n')
    assert scan_cpp("k.cu", memo) == []
    keyed = ('#include <torch/extension.h>\nstatic const void* last_x = nullptr;\n'
             'void launch(float* p);\n'
             'torch::Tensor f(torch::Tensor x) { if (x.data_ptr() == last_x) return x; last_x = x.data_ptr();\n'
             '  launch(x.data_ptr<float>()); return x; }\n')
    assert {(f.hack, f.status) for f in scan_cpp("binding.cpp", keyed)} == {(findings.STATIC_CACHE, "fail")}
    # keyed by address, but only to find a descriptor: no early exit, nothing kept flows to the output
    descriptor = keyed.replace("if (x.data_ptr() == last_x) return x; ", "if (x.data_ptr() != last_x) rebuild(); ")
    assert scan_cpp("binding.cpp", descriptor) == []
    counter = 'torch::Tensor f(torch::Tensor x) { static long call_count = 0; if (call_count++ > 10) return x; return x; }'
    f = scan_cpp("binding.cpp", counter)
    assert [(x.hack, x.status) for x in f] == [(findings.STATIC_CACHE, "suspicious")]


def test_shape_hint_needs_a_config_size():
    src = "void f(int n) { if (n == 4096) fast(); if (n == 0) return; }"
    assert scan_cpp("k.cu", src) == []
    f = scan_cpp("k.cu", src, shape_values={4096, 1000})
    assert [(x.hack, x.status, x.line) for x in f] == [(findings.SHAPE_SPECIALISATION, "suspicious", 1)]
    assert scan_cpp("k.cu", "#define BLOCK 1024\n#define N 1000\n", shape_values={1024, 1000})[0].reason.startswith(
        "constant N = 1000")


@pytest.mark.parametrize("line,hack", [
    ("torch.cuda.Event.elapsed_time = lambda s, e: 0.0", findings.MONKEY_PATCH),
    ("import time as t\nt.perf_counter = lambda: 0.0", findings.MONKEY_PATCH),
    ("from torch import cuda\ncuda.synchronize = lambda: None", findings.MONKEY_PATCH),
    ("import torch.nn.functional as F\nF.layer_norm = lambda *a, **k: None", findings.MONKEY_PATCH),
    ("setattr(torch.cuda, 'synchronize', lambda: None)", findings.MONKEY_PATCH),
    ("import threading", findings.HOST_THREAD),
    ("from scaled_swish import Model", findings.REFERENCE_IMPORT),
    ("torch.backends.cuda.matmul.allow_tf32 = True", findings.MONKEY_PATCH),
])
def test_python_module_level_hacks(line, hack):
    src = "import torch\n" + line + "\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    f = scan_python("c.py", src, reference_modules={"scaled_swish"})
    assert hack in {x.hack for x in f}, f


@pytest.mark.parametrize("body,hack", [
    ("return torch.nn.functional.silu(x) * self.scale", findings.TORCH_COMPUTE),
    ("return x @ x.T", findings.TORCH_COMPUTE),
    ("try:\n            return ext.f(x)\n        except RuntimeError:\n            return x", findings.TRY_CATCH),
    ("return ext.f(x.half()).float()", findings.LOWER_PRECISION),
    ("s = torch.cuda.Stream()\n        return ext.f(x)", findings.SIDE_STREAM),
])
def test_python_modelnew_hacks(body, hack):
    src = ("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        " + body + "\n")
    assert hack in {x.hack for x in scan_python("c.py", src)}


def test_modelnew_with_a_torch_layer_is_compute():
    src = ("import torch.nn as nn\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.lin = nn.Linear(4, 4)\n    def forward(self, x):\n        return ext.relu_only(self.lin(x))\n")
    assert [f.hack for f in scan_python("c.py", src)] == [findings.TORCH_COMPUTE]


# -- the evaluator's static gate ------------------------------------------------------------------------

def test_static_fail_stops_before_compile(tmp_path):
    rep = evaluate(load_task("layernorm_lastdim"), _fixture("side_stream"), "forward",
                   EvalOptions(cache_root=tmp_path, timing=False))
    assert [(v.stage, v.status) for v in rep.verdicts] == [("static", Status.FAIL), ("compile", Status.SKIPPED)]
    assert findings.SIDE_STREAM in rep.verdict("static").reason and not rep.passed
    assert not (tmp_path / "builds").exists() and rep.build == {}


def test_passed_requires_clean_integrity():
    ok = [Verdict(Stage.COMPILE, Status.PASS), Verdict(Stage.CORRECTNESS, Status.PASS)]
    mk = lambda vs: EvalReport("t", "forward", "h", "native", vs, [], {}, {})
    assert mk(ok).passed
    # a static `suspicious` is "a person must confirm": it blocks until one does (engine.verdict.judge)
    assert not mk(ok + [Verdict(Stage.STATIC, Status.SUSPICIOUS, "hint")]).passed
    assert not mk(ok + [Verdict(Stage.INTEGRITY, Status.FAIL, "x")]).passed
    assert not mk([Verdict(Stage.STATIC, Status.FAIL, "x")] + ok).passed
    assert mk([Verdict(Stage.STATIC, Status.FAIL, "x", {"overridden": True})] + ok).passed


def test_integrity_verdict_from_child_result():
    from engine.pipeline.protocol.result import JudgeResult
    assert integrity_verdict(JudgeResult()) is None
    v = integrity_verdict(JudgeResult.from_json({"integrity": {
        "a": {"ok": True}, "b": {"ok": False, "hack": "static-cache", "reason": "static-cache: two calls ..."}}}))
    assert v.status == Status.FAIL and "static-cache" in v.reason and "on b" in v.reason
    assert v.data["configs"]["b"] == {"ok": False, "hack": "static-cache", "reason": "static-cache: two calls ...",
                                      "checks": []}
    assert integrity_verdict(JudgeResult.from_json({"integrity": {"a": {"ok": True}}})).status == Status.PASS


# -- fault isolation that a CPU can show ---------------------------------------------------------------

def test_host_fault_in_one_child_leaves_the_next_evaluation_working():
    from engine.procs import run_child
    bad = run_child("tests.fixtures.sandbox.child_behaviours", {"mode": "segfault"}, timeout_s=60)
    assert bad.crashed and "SIGSEGV" in bad.describe_crash()
    t0 = time.monotonic()
    hung = run_child("tests.fixtures.sandbox.child_behaviours", {"mode": "hang", "pidfile": "/dev/null"},
                     timeout_s=3)
    assert hung.timed_out and time.monotonic() - t0 < 20 and "timed out" in hung.describe_crash()
    ok = run_child("tests.fixtures.sandbox.child_behaviours", {"mode": "ok"}, timeout_s=60)
    assert not ok.crashed and ok.result["finished"]


@pytest.mark.slow
def test_compile_error_is_a_fail_verdict_with_the_cause():
    # the default cache root: its precompiled torch header keeps this compile short
    rep = evaluate(load_task("layernorm_lastdim"), load_candidate(FAULTS / "compile_error"), "forward",
                   EvalOptions(timing=False, build_timeout_s=300))
    c = rep.verdict("compile")
    assert c.status == Status.FAIL and "kernel.cu" in c.reason and not rep.passed
    assert rep.verdict("static").status == Status.PASS


# -- the task filter ----------------------------------------------------------------------------------

@pytest.mark.parametrize("task_name", builtin_task_names())
def test_check_task_finds_no_degenerate_config_on_cpu(task_name):
    from engine.integrity.check_task import check_task
    task = load_task(task_name)
    # kbench's own configs: robust-kbench's settings (tagged) are GPU-sized, and upstream's "standard"
    # initialisations are trivial by design (weight 1, bias 0); tests/pipeline/test_gpu_baselines.py runs them.
    own = [c.name for c in task.configs if "robust-kbench" not in c.tags]
    rows = check_task(task, seeds=2, device="cpu", configs=own)
    assert rows and not [r.error for r in rows if r.error]
    assert any(r.checked for r in rows)
    assert not [r for r in rows if r.degenerate], [(r.direction, r.config, r.flags) for r in rows if r.degenerate]


def _degenerate_task(tmp_path, body):
    src = REPO / "tasks" / "softmax"
    dst = tmp_path / "degenerate"
    dst.mkdir()
    toml = (src / "task.toml").read_text().replace('name = "softmax"', 'name = "degenerate"')
    toml = toml.replace('directions = ["forward", "backward"]', 'directions = ["forward"]')
    toml = toml.split("[backward]")[0] + "[[configs]]" + toml.split("[[configs]]", 1)[1]
    (dst / "task.toml").write_text(toml)
    ref = (src / "reference.py").read_text().replace("return torch.softmax(x, dim=-1)", body)
    (dst / "reference.py").write_text(ref)
    return load_task(dst)


@pytest.mark.parametrize("body,flag", [
    ("return x * 0.0", "zero"),
    ("return torch.softmax(x, dim=-1).mean(-1, keepdim=True).expand_as(x).contiguous()", "constant"),
    ("return torch.softmax(x * 1e-9, dim=-1)", "input-insensitive"),
    ("return x + 1e-7 * torch.tanh(x)", "identity"),
])
def test_check_task_flags_degenerate_references(tmp_path, body, flag):
    from engine.integrity.check_task import check_task
    rows = check_task(_degenerate_task(tmp_path, body), seeds=2, device="cpu", configs=["odd-small", "three-cols"])
    assert rows and all(any(f.startswith(flag) for f in r.flags) for r in rows), [(r.config, r.flags) for r in rows]


def test_check_task_cli_exit_code(tmp_path, capsys):
    from engine.cli import main
    task = _degenerate_task(tmp_path, "return x * 0.0")
    assert main(["check-task", str(task.root), "--seeds", "1", "--config", "three-cols"]) == 1
    out = capsys.readouterr().out
    assert "DEGENERATE:" in out and "zero: an all-zero output passes" in out and "1 degenerate config" in out


def test_check_task_names_a_near_identity_reference_from_the_console_script(tmp_path):
    """The installed `kbench check-task` on a task whose reference barely changes its input: a kernel that copies
    x to the output would pass, which the report names (exit 1). The task's own softmax is not flagged."""
    env = user_env(tmp_path / "home", {"KBENCH_CACHE": str(tmp_path / "cache")})
    near = _degenerate_task(tmp_path, "return x + 1e-7 * torch.tanh(x)")
    out = subprocess.run([str(KBENCH), "check-task", str(near.root), "--seeds", "1", "--config", "three-cols",
                          "--device", "cpu"], check=False, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "identity: argument 0 copied as output 0 passes the comparison" in out.stdout, out.stdout
    honest = subprocess.run([str(KBENCH), "check-task", "softmax", "--seeds", "1", "--config", "three-cols",
                             "--device", "cpu"], check=False, capture_output=True, text=True, env=env, timeout=300)
    assert honest.returncode == 0 and "identity" not in honest.stdout, honest.stdout + honest.stderr


def test_extension_functions_named_like_torch_ops_are_the_candidates_own():
    src = ("import torch\nfrom torch.utils.cpp_extension import load_inline\n"
           "mm_ext = load_inline(name='x', cpp_sources='', cuda_sources='', functions=['matmul'])\n"
           "class ModelNew(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.k = mm_ext\n    def forward(self, a, b):\n        return self.k.matmul(mm_ext.softmax(a), b)\n")
    assert scan_python("c.py", src) == []
    assert [f.hack for f in scan_python("c.py", src.replace("mm_ext.softmax(a)", "a.softmax(-1)"))] == \
        [findings.TORCH_COMPUTE]


def test_persistent_scalars_next_to_data_ptr_are_not_caches():
    src = ('#include <torch/extension.h>\nconstexpr int BLOCK = 256;\nint g_sms = 0;\n'
           'torch::Tensor f(torch::Tensor x) { static int sms = 0; if (!sms) sms = 132;\n'
           '  auto y = torch::empty_like(x);\n'
           '  k<<<sms * 4, BLOCK>>>(x.data_ptr<float>(), y.data_ptr<float>(), g_sms); return y; }\n')
    assert scan_cpp("binding.cpp", src) == []
    keyed = src.replace("static int sms = 0;", "static uintptr_t last = 0; if ((uintptr_t)x.data_ptr() == last) "
                        "return x; static int sms = 0;")
    assert [f.hack for f in scan_cpp("binding.cpp", keyed)] == [findings.STATIC_CACHE]
