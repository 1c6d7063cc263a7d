"""Integrity on a GPU, through evaluate(): every hack in tests/fixtures/hacks is rejected with a verdict
naming it; the hacks the static scan stops are also run with the static gate overridden, to show what the
dynamic checks see; every fault in tests/fixtures/faults is isolated within its timeout and the next
evaluation on the same GPU passes; every baseline is still accepted with the integrity checks on.

Run (on a GPU host, from the repository root), in parts if a command has a time limit:
    python -m pytest -q -m gpu tests/integrity/test_gpu_integrity.py -rA -s -k "every_hack"
    python -m pytest -q -m gpu tests/integrity/test_gpu_integrity.py -rA -s -k "overridden or fault"
    python -m pytest -q -m gpu tests/integrity/test_gpu_integrity.py -rA -s -k "baseline or check_task"
The -s output prints one `INTEGRITY-ROW` line per case for INTEGRITY.md's "verdict on H100" column.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engine.candidates import load_candidate
from engine.config.env import env_float
from engine.pipeline.eval_types import EvalOptions
from engine.pipeline.evaluate import evaluate
from engine.integrity import findings
from engine.pipeline.judge import analysis as dynamic
from engine.tasks.loader import builtin_task_names, load_task
from engine.verdict import Status
from tests.builtin_tasks import baselines
from tests.paths import FIXTURES

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

HACKS = FIXTURES / "hacks"
FAULTS = FIXTURES / "faults"
KB = FIXTURES / "kernelbench"
TIMEOUT_S = env_float("KBENCH_INTEGRITY_TIMEOUT")


@pytest.fixture(scope="module")
def cache_root():
    # the default cache ($KBENCH_CACHE or ~/.cache/kbench): builds and the measured roofline are reused
    # between runs, so the cases can be run in several commands
    from engine.pipeline.eval_types import default_cache_root
    return default_cache_root()


def _cand(name: str, root: Path = HACKS):
    d = root / name
    return load_candidate(d if (d / "kernel.cu").exists() else next(d.glob("*.py")))


def _opts(cache_root, **kw):
    base = {"cache_root": cache_root, "trials": 2, "timing": False, "timeout_s": TIMEOUT_S, "build_timeout_s": 900}
    base.update(kw)
    return EvalOptions(**base)


def _row(name: str, rep) -> str:
    bad = [v for v in rep.verdicts if v.status in (Status.FAIL, Status.SUSPICIOUS)]
    text = "; ".join(f"{v.stage} {v.status.value}: {v.reason[:160]}" for v in bad) or "accepted"
    text += f" | unmeasured: {rep.unmeasured[:300]}" if rep.unmeasured else ""
    line = f"INTEGRITY-ROW | {name} | passed={rep.passed} | {text}"
    print(line)
    return text


# fixture -> (task, direction, [(stage, status, words that must appear in that verdict's reason)]).
# Every case must end not passed, with at least the listed verdicts.
HACK_CASES = {
    "reuse_freed_output": ("layernorm_lastdim", [("correctness", "fail", "unwritten or uninitialised output memory")]),
    "pointer_cache": ("layernorm_lastdim", [("static", "fail", findings.STATIC_CACHE)]),
    "call_count_cache": ("layernorm_lastdim", [("static", "fail", findings.STATIC_CACHE)]),
    "input_mutation": ("layernorm_lastdim", [("correctness", "fail", "modified input 0 in place"),
                                     ("integrity", "fail", dynamic.INPUT_ALIAS)]),
    "side_stream": ("layernorm_lastdim", [("static", "fail", findings.SIDE_STREAM)]),
    "host_thread": ("layernorm_lastdim", [("static", "fail", findings.HOST_THREAD)]),
    "try_catch_fallback": ("layernorm_lastdim", [("static", "fail", findings.TRY_CATCH)]),
    "torch_compute": ("softmax", [("static", "fail", findings.TORCH_COMPUTE)]),
    "vendor_cublas": ("mnist_linear", [("static", "fail", findings.VENDOR_LIBRARY)]),
    "lower_precision": ("layernorm_lastdim", [("static", "fail", findings.LOWER_PRECISION)]),
    "tf32_no_split": ("mnist_linear", [("static", "fail", findings.LOWER_PRECISION)]),
    "shape_specialisation": ("softmax", [("static", "suspicious", findings.SHAPE_SPECIALISATION),
                                         ("correctness", "fail", "")]),
    "constant_output": ("softmax", [("correctness", "fail", ""), ("integrity", "fail", dynamic.CONSTANT_OUTPUT)]),
    "below_floor": ("layernorm_lastdim", [("static", "fail", findings.STATIC_CACHE)]),
    "modelnew_monkeypatch": (str(KB / "scaled_swish.py"), [("static", "fail", findings.MONKEY_PATCH)]),
}


@pytest.mark.parametrize("name", sorted(HACK_CASES))
def test_every_hack_is_rejected_with_a_verdict_naming_it(name, cache_root):
    task_ref, expect = HACK_CASES[name]
    t0 = time.monotonic()
    rep = evaluate(load_task(task_ref), _cand(name), "forward", _opts(cache_root))
    _row(name, rep)
    assert not rep.passed
    for stage, status, words in expect:
        v = rep.verdict(stage)
        assert v is not None and v.status.value == status and words in v.reason, (stage, rep.to_json()["verdicts"])
    assert time.monotonic() - t0 < TIMEOUT_S + 900


# With the static gate overridden (a person's override), what the dynamic checks and timing see.
# (stage, acceptable statuses, words: any of them in the reason)
OVERRIDE_CASES = {
    "pointer_cache": ("layernorm_lastdim", {}, [("integrity", {"fail"}, (dynamic.PERSISTENT_OUTPUT, dynamic.STALE_RESULT))]),
    "call_count_cache": ("layernorm_lastdim", {}, [("integrity", {"fail"}, (dynamic.PERSISTENT_OUTPUT, dynamic.STALE_RESULT))]),
    "side_stream": ("layernorm_lastdim", {"timing": True, "timing_configs": ["bench"], "baselines": ("eager",)},
                    [("integrity|timing", {"fail", "suspicious"}, (dynamic.SIDE_WORK, "work continues after"))]),
    "host_thread": ("layernorm_lastdim", {}, [("integrity|correctness", {"fail"}, (dynamic.SIDE_WORK, "NaN"))]),
    "lower_precision": ("layernorm_lastdim", {}, [("correctness", {"fail"}, ("outside atol",))]),
}


def test_a_monkey_patched_clock_past_the_static_gate_changes_nothing(cache_root, gpu_to_itself):
    """The candidate shrinks torch's event times and the host clock in its own process; the judge's numbers
    come from the compiled helper's events, so its speedup is that of the same kernel without the patch."""
    task = load_task(str(KB / "scaled_swish.py"))
    opts = _opts(cache_root, override_static=True, timing=True, baselines=("eager",))
    cheat = evaluate(task, _cand("modelnew_monkeypatch"), "forward", opts)
    honest = evaluate(task, load_candidate(KB / "candidates" / "scaled_swish_correct.py"), "forward", opts)
    _row("modelnew_monkeypatch (static overridden)", cheat)
    assert cheat.passed and honest.passed, cheat.to_json()["verdicts"]
    ratio = cheat.geomean_speedup_eager / honest.geomean_speedup_eager
    print(f"INTEGRITY-ROW | modelnew_monkeypatch vs honest | speedup ratio {ratio:.3f}")
    assert 0.7 < ratio < 1.4, ratio


@pytest.mark.parametrize("name", sorted(OVERRIDE_CASES))
def test_dynamic_checks_catch_hacks_past_an_overridden_static_gate(name, cache_root, gpu_to_itself):
    task_ref, extra, expect = OVERRIDE_CASES[name]
    rep = evaluate(load_task(task_ref), _cand(name), "forward", _opts(cache_root, override_static=True, **extra))
    _row(name + " (static overridden)", rep)
    assert rep.verdict("static").data.get("overridden")
    for stages, statuses, words in expect:
        hits = [v for v in rep.verdicts if v.stage in stages.split("|") and v.status.value in statuses
                and any(w in v.reason for w in words)]
        assert hits, (stages, words, rep.to_json()["verdicts"])
    assert not rep.passed


def test_a_kept_output_keyed_on_a_sample_never_fires_past_the_static_gate(cache_root, gpu_to_itself):
    """below_floor skips its kernel when a 64-element sample of x is unchanged. Every call's inputs are fresh (all
    their elements), so it computes every call: measured at its kernel's own speed, not below the floor."""
    opts = _opts(cache_root, override_static=True, timing=True, timing_configs=["bench"], baselines=("eager",))
    rep = evaluate(load_task("layernorm_lastdim"), _cand("below_floor"), "forward", opts)
    _row("below_floor (static overridden)", rep)
    assert rep.verdict("correctness").status.value == "pass" and rep.verdict("timing").status.value == "pass", \
        rep.to_json()["verdicts"]


FAULT_CASES = {
    "compile_error": ("compile", "kernel.cu"),
    "infinite_loop": ("correctness", "timed out"),
    "oob_read": ("correctness", "CUDA error"),
    "host_segfault": ("correctness", "SIGSEGV"),
    "gpu_oom": ("correctness", "out of memory"),
    # the helper's own copy of the output fails after the job began: ended through the records, not the deadline
    "uncopyable_output": ("correctness", "out of memory"),
}


@pytest.mark.parametrize("name", sorted(set(FAULT_CASES) - {"gpu_oom"}))
def test_every_fault_is_isolated_and_the_next_evaluation_succeeds(name, cache_root):
    _fault_is_isolated(name, cache_root)


def test_a_kernel_out_of_gpu_memory_fails_on_a_gpu_of_its_own(cache_root, gpu_to_itself):
    """gpu_oom, on a GPU no other test holds: beside other tests' evaluations holding more of its memory than the
    candidate it would be left unmeasured (engine.pipeline.judge.memory.runner_memory_excuse)."""
    _fault_is_isolated("gpu_oom", cache_root)


def _fault_is_isolated(name: str, cache_root) -> None:
    stage, words = FAULT_CASES[name]
    task = load_task("layernorm_lastdim")
    timeout = 60.0 if name in ("infinite_loop", "uncopyable_output") else TIMEOUT_S
    opts = _opts(cache_root, timeout_s=timeout, configs=["odd-small", "offset-mean"])
    rep = evaluate(task, _cand(name, FAULTS), "forward", opts)
    _row(f"fault {name}", rep)
    v = rep.verdict(stage)
    assert not rep.passed and v is not None and v.status == Status.FAIL, rep.to_json()["verdicts"]
    assert words.lower() in v.reason.lower(), v.reason
    assert rep.seconds < timeout + rep.build.get("seconds", 0) + 60, rep.seconds
    ok = evaluate(task, load_candidate(task.baseline_dir("forward")), "forward", opts)
    assert ok.passed, ok.to_json()["verdicts"]


@pytest.mark.parametrize("task_name,direction", list(baselines()))
def test_no_false_rejection_of_any_baseline(task_name, direction, cache_root):
    task = load_task(task_name)
    rep = evaluate(task, load_candidate(task.baseline_dir(direction)), direction,
                   _opts(cache_root, timing=True, baselines=("eager",), timing_configs=["bench"]
                         if any(c.name == "bench" for c in task.configs) else None))
    _row(f"baseline {task_name}/{direction}", rep)
    blocking = [v for v in rep.verdicts if v.status in (Status.FAIL, Status.SUSPICIOUS)]
    assert not blocking, rep.to_json()["verdicts"]
    if rep.verdict("correctness").status == Status.SKIPPED:
        # other tests' evaluations held the GPU's memory, twice: no verdict, which is not a rejection
        assert "other processes held more of it" in rep.unmeasured or "judge ran out of GPU memory" in \
            rep.unmeasured, rep.unmeasured
        return
    assert rep.passed, rep.to_json()["verdicts"]
    # beside other tests' evaluations the timing checks may leave it unmeasured: not a rejection, no speedup
    done = (Status.SKIPPED,) if rep.unmeasured else (Status.PASS,)
    assert rep.verdict("static").status == Status.PASS and rep.verdict("integrity").status in done
    t = rep.verdict("timing")
    assert t.status != Status.FAIL, t.reason
    assert "below the physical floor" not in t.reason, t.reason  # a false floor would be a false accusation


def test_check_task_on_gpu_reports_no_degenerate_config():
    from engine.integrity.check_task import check_task
    bad = []
    for name in builtin_task_names():
        rows = check_task(load_task(name), seeds=3, device="cuda")
        bad += [(name, r.direction, r.config, r.flags) for r in rows if r.degenerate]
        assert all(r.checked for r in rows), [(r.config, r.skipped, r.error) for r in rows if not r.checked]
    assert not bad, bad
