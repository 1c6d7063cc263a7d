"""What a person sees on a machine without a GPU, where kbench would otherwise wait in silence: `kbench eval`
says at once that no GPU is visible (after compiling, without starting a judge), long builds say what they are
doing, and a KernelBench candidate's typo is reported in seconds. CUDA_VISIBLE_DEVICES="" hides any GPU, so
these run the same on a GPU machine."""

from __future__ import annotations

import json
import os
import resource
import time
import uuid

import pytest

from tests.acceptance.conftest import KBENCH
from tests import prebuilt_pch
from tests.acceptance.terminal import Terminal
from tests.paths import REPO

KB = REPO / "tests" / "fixtures" / "kernelbench"
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}

# A ModelNew with no extension to build (the exploit catalog's control): its compile stage is its import, so
# no compiler runs here
TORCH_MODELNEW = REPO / "tests" / "fixtures" / "exploits" / "honest.py"


def test_eval_without_a_gpu_says_so_in_one_line_and_starts_no_judge(user):
    cand = user.cwd / "swish_new.py"
    cand.write_text(TORCH_MODELNEW.read_text())
    args = ("eval", str(KB / "scaled_swish.py"), str(cand), "--override-static")
    t0 = time.monotonic()
    out = user.run(*args, env=NO_GPU, timeout=120)
    took = time.monotonic() - t0
    assert out.returncode == 3, out.stdout + out.stderr
    said = [ln for ln in out.stderr.splitlines() if "no CUDA GPU is visible" in ln]
    assert len(said) == 1 and "CUDA_VISIBLE_DEVICES" in said[0] and "no judge started" in said[0], out.stderr
    assert "judge + jailed runner" not in out.stderr
    assert "compile      PASS" in out.stdout and "COMPILED, NOT CHECKED" in out.stdout, out.stdout
    assert took < 30, f"{took:.1f} s"
    report = json.loads(user.run(*args, "--json", env=NO_GPU, timeout=120).stdout)
    assert not any(p.startswith("judge") for p in report["phases"]), report["phases"]


def _first_line_with(proc, text: str, timeout: float) -> tuple[str, float]:
    """The first stderr line of `proc` that holds `text`, and when it came (seconds after the call)."""
    t0 = time.monotonic()
    seen = []
    while time.monotonic() - t0 < timeout:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return line, time.monotonic() - t0
    raise AssertionError(f"no line with {text!r} in {timeout} s; stderr:\n{''.join(seen)}")


def test_eval_with_a_fresh_cache_says_it_builds_the_precompiled_header(user, tmp_path):
    user.env["KBENCH_CACHE"] = str(tmp_path / "fresh-cache")
    proc = user.start("eval", "gelu_bias", str(REPO / "tasks" / "gelu_bias" / "baselines" / "forward"), env=NO_GPU)
    try:
        line, at = _first_line_with(proc, "precompiled header", 60)
        assert "building torch's precompiled header once, about a minute" in line
        assert at < 15 and proc.poll() is None, f"said after {at:.1f} s"    # before the wait, not after it
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def test_the_app_says_the_first_session_waits_for_the_precompiled_header(user, tmp_path):
    user.env["KBENCH_CACHE"] = str(tmp_path / "fresh-cache")
    term = Terminal([str(KBENCH)], cwd=user.cwd, env={**user.env, **NO_GPU})
    try:
        term.wait_for(lambda t: "Tasks (enter: new session)" in t and "gelu_bias" in t, 90, "the home screen")
        term.send("n")                               # gelu_bias, the first task, has the focus
        term.wait_for(lambda t: "New evolution session" in t, 30, "the new-session form")
        term.send("\x13")                            # ctrl+s: Start
        shown = term.wait_for(lambda t: "building torch's precompiled header" in t, 60,
                              "the precompiled header's wait on the session screen")
        row = next(line for line in shown.splitlines() if "g0-1" in line and "baseline" in line)
        assert "compiling" in row and "pending" not in row, shown
    finally:
        term.close()


PCH_REFERENCE_S = 40.0     # torch's precompiled header on the idle 2-core box (BENCHMARKS.md, a KernelBench typo)


def _children_cpu() -> float:
    """User + system seconds of every child this process has waited for, and of the children they waited for."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@pytest.mark.slow
def test_a_kernelbench_typo_is_reported_in_seconds_naming_its_line(user):
    """A one-character typo in a ModelNew's CUDA source: the compile verdict quotes nvcc's error and the line, in
    under 30 s of build on an idle 2-core machine (torch's precompiled header, built once per machine, aside).
    Other work on the machine stretches the wall time, so that bound scales with the load. The load average lags,
    and a shared machine's other tenants are not in it: one CI run measured 63 s of wall for this build at load 1.5
    per CPU, on a day its whole run took 2.6x as long as usual. So the build also passes on the CPU time the command
    and every process it waited for spent, which contention does not stretch: 45 s, since the build runs its
    compilers side by side (46 s of CPU in 28.5 s of wall at load 0.6 on the 2-core box, 2026-12-01). Either bound
    scales with how much slower this machine built torch's header than the reference box; minutes fail both."""
    cand = user.cwd / "swish_typo.py"
    cand.write_text((KB / "candidates" / "scaled_swish_compile_error.py").read_text()
                    + f"\n# {uuid.uuid4().hex}: a source of its own, so no earlier build of it is in the cache\n")
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    cpu0 = _children_cpu()
    out = user.run("eval", str(KB / "scaled_swish.py"), str(cand), "--json", env=NO_GPU, timeout=900)
    cpu = _children_cpu() - cpu0
    assert out.returncode == 1, out.stdout + out.stderr
    report = json.loads(out.stdout)
    compile_ = next(v for v in report["verdicts"] if v["stage"] == "compile")
    assert compile_["status"] == "fail"
    assert 'cuda.cu:10: identifier "scal" is undefined' in compile_["reason"], compile_["reason"]
    assert "y[i] = scal * x[i]" in compile_["reason"]                      # the offending line, quoted
    steps = report["build"]["steps"]
    took = report["build"]["seconds"] - steps.get("pch", 0.0)
    load = max(load, os.getloadavg()[0] / (os.cpu_count() or 1))
    # The test run's own build of torch's header measured the machine (tests/prebuilt_pch.py): that build took
    # 40 s on the idle 2-core box the 30 s were set on (BENCHMARKS.md), so a slower one stretches the bound.
    slower = max(steps.get("pch", 0.0), prebuilt_pch.built_seconds() or 0.0) / PCH_REFERENCE_S
    print(f"TYPO-BUILD cpu {cpu:.1f} s, wall {took:.1f} s, load {load:.2f} per CPU, header build {slower:.2f}x")
    assert took < 30 * max(1.0, load, slower) or cpu < 45 * max(1.0, slower), (
        f"{took:.1f} s of wall at load {load:.1f} per CPU, {cpu:.1f} s of CPU, the header build {slower:.1f}x the "
        f"reference box's; steps {steps}")
    assert "kbench_torch.h" in compile_["data"]["log"]      # main.cpp was compiled against the precompiled header


def test_check_task_on_a_cpu_skips_the_readme_tasks_4096_by_4096_config_and_says_so(user):
    """The README's own task (my_tasks/scaled_tanh) has a 4096x4096 `bench` config: checked on a CPU it took six
    minutes. Now it is skipped with the reason, the small configs are checked, and the whole check is short."""
    from tests.acceptance.test_app_llm import readme_task

    readme_task(user)
    t0 = time.monotonic()
    out = user.run("check-task", "scaled_tanh", env=NO_GPU, timeout=600)
    took = time.monotonic() - t0
    assert out.returncode == 0, out.stdout + out.stderr
    bench = next(line for line in out.stdout.splitlines() if " bench " in line)
    assert "skipped: too large for the CPU check: 0.13 GB moved" in bench and "--cpu-all" in bench, out.stdout
    assert "[cpu, 3 seeds]  ok" in out.stdout and "(2 checked, 1 skipped)" in out.stdout, out.stdout
    assert "starting torch" in out.stderr and "sizing its configs for the CPU" in out.stderr, out.stderr
    assert took < 120, f"{took:.0f} s"
