"""The tuner: knob annotations parsed, every proposal legal, nearest first, never a duplicate."""

from __future__ import annotations

import difflib
import itertools
import sys

import pytest

from tests.paths import LLM_FIXTURES

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import BINDING, KERNEL, REPO, layernorm, parent_candidate  # noqa: E402,F401

from engine.candidates import Candidate, load_candidate  # noqa: E402
from engine.proposers import ProposalRequest, ProposalStatus  # noqa: E402
from engine.proposers.knobs import KnobError, apply_settings, evaluate, legal, parse_knobs  # noqa: E402
from engine.proposers.tuner import TunerProposer  # noqa: E402


def tune(task, parent, **kw):
    return ProposalRequest(task=task, operator="tune", parents=(parent,), **kw)


def with_kernel(text: str) -> Candidate:
    return Candidate("native", {"kernel.cu": text, "binding.cpp": BINDING}, "k")


def test_parse_fixture_knobs():
    knobs = parse_knobs(parent_candidate())
    assert [(k.name, k.value, k.values, k.requires) for k in knobs] == [
        ("BLOCK_SIZE", "256", ("128", "256", "512", "1024"), None),
        ("MIN_BLOCKS", "2", ("1", "2", "4", "8"), "BLOCK_SIZE*MIN_BLOCKS<=2048")]


def test_sweep_is_legal_nearest_first_and_without_duplicates(layernorm):
    parent = parent_candidate()
    knobs = parse_knobs(parent)
    tuner = TunerProposer()
    props = tuner.sweep(tune(layernorm, parent))
    legal_settings = [s for s in itertools.product(*(k.values for k in knobs))
                      if legal(knobs, dict(zip(["BLOCK_SIZE", "MIN_BLOCKS"], s)))]
    assert len(legal_settings) == 13 and len(props) == 12  # every legal setting but the parent's own
    hashes = [p.candidate.source_hash for p in props]
    assert len(set(hashes)) == 12 and parent.source_hash not in hashes
    for p in props:
        assert p.status == ProposalStatus.OK and p.operator == "tune" and p.proposer == "tuner"
        s = p.data["knobs"]
        assert int(s["BLOCK_SIZE"]) * int(s["MIN_BLOCKS"]) <= 2048
        assert p.candidate.meta["knobs"] == s and p.candidate.meta["parents"] == [parent.source_hash]
        reparsed = {k.name: k.value for k in parse_knobs(p.candidate)}
        assert reparsed == s  # the rewritten file still parses, with the proposed values
    # single-knob changes first, each nearest first
    changed = [len(p.data["changed"]) for p in props]
    assert changed == sorted(changed) and changed[0] == 1
    assert props[0].rationale in ("knobs: BLOCK_SIZE 256 -> 128", "knobs: BLOCK_SIZE 256 -> 512")
    # spent: further calls say so instead of repeating
    again = tuner.propose(tune(layernorm, parent))
    assert again.status == ProposalStatus.EMPTY and "every legal knob setting" in again.reason


def test_only_the_value_is_rewritten():
    parent = parent_candidate()
    child = apply_settings(parent, {"BLOCK_SIZE": "1024", "MIN_BLOCKS": "1"})
    diff = [l for l in difflib.unified_diff(KERNEL.splitlines(), child.files["kernel.cu"].splitlines(), lineterm="")
            if l.startswith(("+", "-")) and not l.startswith(("+++", "---"))]
    assert diff == [
        "-#define BLOCK_SIZE 256  // kbench:knob values=128,256,512,1024",
        "-#define MIN_BLOCKS 2    // kbench:knob values=1,2,4,8 requires=BLOCK_SIZE*MIN_BLOCKS<=2048",
        "+#define BLOCK_SIZE 1024  // kbench:knob values=128,256,512,1024",
        "+#define MIN_BLOCKS 1    // kbench:knob values=1,2,4,8 requires=BLOCK_SIZE*MIN_BLOCKS<=2048"]
    assert child.files["binding.cpp"] == BINDING


def test_known_hashes_and_a_fresh_tuner(layernorm):
    parent = parent_candidate()
    first = TunerProposer().sweep(tune(layernorm, parent), limit=5)
    known = frozenset(p.candidate.source_hash for p in first)
    rest = TunerProposer().sweep(tune(layernorm, parent, known_hashes=known))
    assert len(rest) == 7 and not known & {p.candidate.source_hash for p in rest}


def test_dedupe_is_per_parent(layernorm):
    tuner = TunerProposer()
    a = parent_candidate()
    b = with_kernel(KERNEL.replace("MIN_BLOCKS 2 ", "MIN_BLOCKS 4 "))  # a sibling with another start point
    pa = tuner.sweep(tune(layernorm, a))
    pb = tuner.sweep(tune(layernorm, b))
    assert len(pa) == 12 and len(pb) == 12  # b's space includes a's parent setting, which b may propose


def _annotated_baselines():
    out = []
    for folder in sorted((REPO / "tasks").glob("*/baselines/*")):
        if (folder / "kernel.cu").is_file() and "kbench:knob" in (folder / "kernel.cu").read_text():
            out.append(folder)
    return out


@pytest.mark.parametrize("folder", _annotated_baselines(), ids=lambda p: f"{p.parts[-3]}-{p.name}")
def test_tuner_over_real_baselines(folder, layernorm):
    parent = load_candidate(folder)
    knobs = parse_knobs(parent)
    assert knobs, "annotated baselines must parse"
    space = [dict(zip([k.name for k in knobs], vals)) for vals in itertools.product(*(k.values for k in knobs))]
    expected = sum(1 for s in space if legal(knobs, s)) - 1
    props = TunerProposer().sweep(tune(layernorm, parent))
    assert len(props) == expected
    hashes = {p.candidate.source_hash for p in props}
    assert len(hashes) == len(props) and parent.source_hash not in hashes
    for p in props:
        for k in knobs:
            assert p.data["knobs"][k.name] in k.values
        assert legal(knobs, p.data["knobs"])


@pytest.mark.parametrize("line, msg", [
    ("#define B 3  // kbench:knob values=1,2,4", "not one of its values"),
    ("#define B 2  // kbench:knob values=", "empty values"),
    ("#define B 2  // kbench:knob", "no values="),
    ("#define B 2  // kbench:knob values=1,2,2", "twice"),
    ("#define B 2  // kbench:knob values=1,2 step=2", "unknown knob setting step="),
    ("#define B 2  // kbench:knob oops values=1,2", "cannot read"),
    ("#define B 2  // kbench:knob values=1,2 requires=B=2", "requires="),
    ("#define B 2  // kbench:knob values=1,2 requires=B>1?1:0", "requires="),
    ("#define B 2  // kbench:knob values=1,2 requires=__import__('os')", "not allowed"),
    ("#define B 2  // kbench:knob values=1,2 requires=BB*2<=8", "BB is not"),
    ("#define B 2  // kbench:knob values=1,2\n#define B 2  // kbench:knob values=1,2", "also defined"),
])
def test_malformed_annotations(line, msg, layernorm):
    cand = with_kernel(f"__global__ void k() {{}}\n{line}\n")
    with pytest.raises(KnobError, match=msg) as err:
        parse_knobs(cand)
    assert "kernel.cu" in str(err.value)
    p = TunerProposer().propose(tune(layernorm, cand))
    assert p.status == ProposalStatus.FAILED and "cannot tune" in p.reason


def test_no_knobs_is_empty(layernorm):
    p = TunerProposer().propose(tune(layernorm, with_kernel("__global__ void k() {}\n")))
    assert p.status == ProposalStatus.EMPTY and "no `// kbench:knob`" in p.reason
    assert TunerProposer().propose(ProposalRequest(task=layernorm, operator="tune")).status == ProposalStatus.FAILED


def test_knob_space_limit(layernorm):
    lines = "".join(f"#define K{i} 1  // kbench:knob values=1,2,3,4\n" for i in range(10))
    p = TunerProposer(max_space=1000).propose(tune(layernorm, with_kernel("__global__ void k(){}\n" + lines)))
    assert p.status == ProposalStatus.FAILED and "1048576 settings" in p.reason


def test_identifier_values_and_c_semantics():
    cand = with_kernel("__global__ void k(){}\n"
                       "#define LOAD scalar  // kbench:knob values=scalar,vec2,vec4\n"
                       "#define N 8  // kbench:knob values=8,16 requires=!(LOAD==scalar && N>8) || N%16==0\n")
    knobs = parse_knobs(cand)
    assert legal(knobs, {"LOAD": "vec4", "N": "16"}) and legal(knobs, {"LOAD": "scalar", "N": "16"})
    assert evaluate("-7/2 == -3 && -7%2 == -1 && 7/2 == 3", {})  # C truncation, not Python floor
    assert evaluate("1<<4 == 16 && (6&3) == 2 && (5|2) == 7 && (6^3) == 5 && ~0 == -1", {})
    assert evaluate("A != B", {"A": "1", "B": "0x2"}) and evaluate("true && !false", {})
    with pytest.raises(KnobError, match="division by zero"):
        evaluate("A/0", {"A": "1"})
