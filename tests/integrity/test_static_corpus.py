"""The static rules over a corpus: every built-in baseline, every kernel among the test fixtures, and kernel
files written in the styles of the field (tests/fixtures/corpus). No rule fires on an honest construct under
either library policy; each catalogued hack fires with the status its first lines expect; library uses fail
under `pure` and are tagged under `engineering`."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from engine.candidates import Candidate, load_candidate
from engine.integrity.findings import FAIL, INFO, RULES
from engine.integrity.static import check_candidate, scan_candidate, scan_cpp, scan_python
from engine.integrity.triton_scan import scan_triton_source
from engine.tasks.loader import load_task
from engine.verdict import Status
from tests.builtin_tasks import baselines
from tests.paths import FIXTURES

CORPUS = FIXTURES / "corpus"
POLICIES = ("pure", "engineering")
SHAPES = {4096, 1000}   # config sizes the shape hint is told about for the corpus


def _scan_file(path: Path, policy: str):
    text = path.read_text()
    if path.name.startswith("triton_") or path.name == "kernel.py":   # a Triton candidate's kernel.py
        return scan_triton_source(path.name, text, shape_values=SHAPES, policy=policy)[0]
    if path.suffix == ".py":
        return scan_python(path.name, text, shape_values=SHAPES, policy=policy)
    return scan_cpp(path.name, text, shape_values=SHAPES, policy=policy)


def _fixture_kernels() -> list[Path]:
    """Every kernel source among the test fixtures that is not a deliberate hack or fault."""
    fx = FIXTURES
    out = []
    for p in sorted(fx.rglob("*")):
        rel = p.relative_to(fx).parts
        if rel[0] in ("hacks", "corpus", "exploits") or not p.is_file():
            continue
        if p.suffix in (".cu", ".cpp", ".cuh", ".h") or (p.suffix == ".py" and "ModelNew" in p.read_text()) or \
                (rel[0] == "triton" and p.name == "kernel.py"):
            out.append(p)
    return out


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("task_name,direction", list(baselines()))
def test_no_rule_fires_on_a_builtin_baseline(task_name, direction, policy):
    task = load_task(task_name)
    findings = scan_candidate(load_candidate(task.baseline_dir(direction)), task, policy)
    assert findings == [], [f.describe() for f in findings]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("path", _fixture_kernels(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_no_rule_fires_on_a_fixture_kernel(path, policy):
    findings = [f for f in _scan_file(path, policy) if f.status != INFO]
    assert findings == [], [f.describe() for f in findings]


HONEST = sorted((CORPUS / "honest").iterdir())
ENGINEERING = sorted((CORPUS / "engineering").iterdir())
HACKS = sorted((CORPUS / "hacks").iterdir())


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("path", HONEST, ids=lambda p: p.name)
def test_no_rule_fires_on_honest_field_styles(path, policy):
    findings = _scan_file(path, policy)
    assert findings == [], [f.describe() for f in findings]


@pytest.mark.parametrize("path", ENGINEERING, ids=lambda p: p.name)
def test_library_use_fails_pure_and_is_tagged_under_engineering(path):
    pure = _scan_file(path, "pure")
    eng = _scan_file(path, "engineering")
    assert pure and all(f.status == FAIL and f.library for f in pure), [f.describe() for f in pure]
    assert eng and all(f.status == INFO and f.library for f in eng), [f.describe() for f in eng]
    assert {(f.hack, f.line) for f in pure} == {(f.hack, f.line) for f in eng}


def _expectations(path: Path) -> list[tuple[str, str, str]]:
    out = []
    for line in path.read_text().splitlines()[:4]:
        m = re.match(r"\s*(?://|#)\s*expect:\s*(\S+)\s+(\S+)\s*(\S+)?", line)
        if m:
            out.append((m.group(1), m.group(2), m.group(3) or m.group(2)))
    return out


@pytest.mark.parametrize("path", HACKS, ids=lambda p: p.name)
def test_each_catalogued_hack_still_fires(path):
    expected = _expectations(path)
    assert expected, f"{path.name}: no `expect:` line"
    for i, policy in enumerate(POLICIES):
        got = {(f.hack, f.status) for f in _scan_file(path, policy)}
        for rule, *statuses in expected:
            assert rule in RULES, rule
            assert (rule, statuses[i]) in got, f"{path.name} under {policy}: expected {rule} {statuses[i]}, got {got}"


def test_engineering_verdict_lists_the_library_uses_and_passes():
    cand = Candidate("robust-kbench", {"kernel.cu": (CORPUS / "engineering" / "cublaslt_gemm_epilogue.cu").read_text()})
    v = check_candidate(cand, None, "engineering")
    assert v.status == Status.PASS, v.reason
    assert v.data["policy"] == "engineering" and v.data["policy_source"] == "session"
    assert set(v.data["libraries"]) == {"cuBLASLt"} and "cuBLASLt" in v.reason
    p = check_candidate(cand, None, "pure")
    assert p.status == Status.FAIL and "vendor-library" in p.reason and p.data["policy"] == "pure"


def test_a_candidate_of_library_calls_only_is_suspicious_under_engineering():
    src = ("#include <torch/extension.h>\ntorch::Tensor forward(torch::Tensor a, torch::Tensor b) {\n"
           "    return torch::matmul(a, b);\n}\n")
    cand = Candidate("robust-kbench", {"kernel.cu": src})
    v = check_candidate(cand, None, "engineering")
    assert v.status == Status.SUSPICIOUS and "no-own-kernel" in v.reason
    assert check_candidate(cand, None, "pure").status == Status.FAIL


def test_static_scan_stays_under_50_ms_a_candidate():
    """The largest built-in baseline and the largest corpus file, best of three (BENCHMARKS.md)."""
    cands = [(load_candidate(load_task(t).baseline_dir(d)), load_task(t)) for t, d in baselines()]
    worst = 0.0
    for cand, task in cands:
        best = min(_timed(lambda: scan_candidate(cand, task)) for _ in range(3))
        worst = max(worst, best)
    assert worst < 0.050, f"slowest candidate took {worst * 1e3:.1f} ms"


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
