"""The replay proposer: a directory of candidates, and a recorded session through the reader protocol."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.paths import LLM_FIXTURES, REPO
from tests.proposers.conftest import req

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import BINDING, KERNEL, layernorm, parent_candidate  # noqa: E402,F401

from engine.candidates import Candidate  # noqa: E402
from engine.proposers import ProposalRequest, ProposalStatus  # noqa: E402
from engine.proposers.replay import ReplayProposer, recorded_from  # noqa: E402

OK, FAILED, EMPTY = ProposalStatus.OK, ProposalStatus.FAILED, ProposalStatus.EMPTY
RK_CU = ("#include <torch/extension.h>\n__global__ void k(float* y) { y[0] = 1.f; }\n"
         "torch::Tensor forward(torch::Tensor x) { return x; }\n"
         "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"forward\", &forward); }\n")


def make_dir(root: Path) -> Path:
    native = root / "01-first"
    (native / ".kbench").mkdir(parents=True)
    (native / "kernel.cu").write_text(KERNEL)
    (native / "binding.cpp").write_text(BINDING)
    (native / ".kbench" / "prompt.md").write_text("# Proposal abc · translate · anthropic\nrecorded prompt\n")
    (root / "2.cu").write_text(RK_CU)
    mutated = Candidate("native", {"kernel.cu": KERNEL.replace("BLOCK_SIZE 256 ", "BLOCK_SIZE 512 "),
                                   "binding.cpp": BINDING}, "wide",
                        {"operator": "mutate", "parents": ["s-g1-1"], "rationale": "wider blocks",
                         "model": "claude-opus-4-5"})
    (root / "10-json.json").write_text(json.dumps(mutated.to_json()))
    (root / "broken").mkdir()
    (root / "broken" / "kernel.cu").write_text(KERNEL)  # binding.cpp missing
    (root / "README.md").write_text("not a candidate")
    (root / ".hidden.cu").write_text("ignored")
    return root


def test_directory_replay_in_natural_order(tmp_path, layernorm):
    rp = ReplayProposer.from_directory(make_dir(tmp_path / "cands"))
    first, second, third, broken, end = (rp.propose(req(layernorm, "translate")) for _ in range(5))

    assert first.status == OK and first.candidate.files == {"kernel.cu": KERNEL, "binding.cpp": BINDING}
    assert first.prompt.startswith("# Proposal abc") and first.proposer == "replay"
    assert first.candidate.meta["proposer"] == "replay" and first.candidate.meta["replay_of"].endswith("01-first")

    assert second.status == OK and second.candidate.format == "robust-kbench"
    assert third.status == OK and third.operator == "mutate" and third.rationale == "wider blocks"
    assert third.parents == ("s-g1-1",) and third.model == "claude-opus-4-5"  # recorded lineage kept
    assert third.candidate.meta["proposal_id"] == third.id

    assert broken.status == FAILED and "broken" in broken.reason and "binding.cpp" in broken.reason
    assert end.status == EMPTY and "spent (4 entries" in end.reason
    assert rp.propose(req(layernorm, "translate")).status == EMPTY


def test_request_parents_override_recorded_ones(tmp_path, layernorm):
    rp = ReplayProposer.from_directory(make_dir(tmp_path / "c"), match_operator=True)
    parent = parent_candidate()
    p = rp.propose(req(layernorm, "mutate", parent))
    assert p.status == OK and p.operator == "mutate" and p.parents == (parent.source_hash,)
    assert p.data["recorded_parents"] == ["s-g1-1"]


def test_known_hashes_are_skipped(tmp_path, layernorm):
    known = frozenset({parent_candidate().source_hash})
    rp = ReplayProposer.from_directory(make_dir(tmp_path / "c"))
    p = rp.propose(req(layernorm, "translate", known_hashes=known))
    assert p.status == OK and p.candidate.format == "robust-kbench"


def test_a_single_candidate_folder_or_file(tmp_path, layernorm):
    make_dir(tmp_path / "c")
    rp = ReplayProposer.from_directory(tmp_path / "c" / "01-first")
    assert rp.propose(req(layernorm, "translate")).status == OK
    assert rp.propose(req(layernorm, "translate")).status == EMPTY
    rp = ReplayProposer.from_directory(tmp_path / "c" / "2.cu")
    assert rp.propose(req(layernorm, "translate")).candidate.format == "robust-kbench"


def test_missing_directory(tmp_path, layernorm):
    rp = ReplayProposer.from_directory(tmp_path / "nope")
    p = rp.propose(req(layernorm, "translate"))
    assert p.status == FAILED and "no such file" in p.reason
    assert rp.propose(req(layernorm, "translate")).status == EMPTY


def test_session_replay_through_a_reader(layernorm):
    a = parent_candidate("a")
    b = Candidate("native", {"kernel.cu": KERNEL.replace("MIN_BLOCKS 2 ", "MIN_BLOCKS 1 "), "binding.cpp": BINDING},
                  "b")
    records = [SimpleNamespace(id="s-g0-1", operator="translate", parents=(), rationale="first", model="m"),
               SimpleNamespace(id="s-g1-1", operator="tune", parents=("s-g0-1",), rationale="knobs", model=None)]

    class Reader:
        def recorded_proposals(self, session):
            assert session == "s"
            return [recorded_from(records[0], a, prompt="asked"), recorded_from(records[1], b)]

    rp = ReplayProposer.from_session(Reader(), "s")
    one, two, end = (rp.propose(req(layernorm, "replay")) for _ in range(3))
    assert one.status == OK and one.operator == "translate" and one.prompt == "asked" and one.data["replay_of"] == "s-g0-1"
    assert two.operator == "tune" and two.parents == ("s-g0-1",) and two.rationale == "knobs"
    assert end.status == EMPTY


def test_offline_proposers_never_load_the_sdk():
    code = ("import sys, engine.proposers, engine.proposers.tuner, engine.proposers.replay, engine.proposers.human, "
            "engine.llm.availability; print('anthropic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO)
    assert out.stdout.strip() == "False"


def test_replay_a_real_workspace_session(tmp_path, layernorm):
    ws_mod = pytest.importorskip("engine.workspace")
    from engine.proposers.tuner import TunerProposer

    ws = ws_mod.Workspace.create(tmp_path / "ws")
    try:
        ws.start_session("s1", layernorm, proposer="tuner")
        first = ws.commit_candidate("s1", parent_candidate("seed"), operator="translate", proposer="human",
                                    rationale="hand translation", prompt="# asked\n")
        parent = ws.files(first.id)
        tuned = TunerProposer().propose(ProposalRequest(task=layernorm, operator="tune", parents=(parent,)))
        assert tuned.parents == (first.id,)  # workspace candidates are named by their id
        second = ws.commit_candidate("s1", tuned.candidate, parents=[first.id], rationale=tuned.rationale)

        rp = ReplayProposer.from_workspace(ws, "s1")
        one, two, end = (rp.propose(req(layernorm, "replay")) for _ in range(3))
    finally:
        ws.close()
    assert one.status == OK and one.operator == "translate" and one.data["replay_of"] == first.id
    assert one.candidate.files == parent_candidate().files and one.prompt.startswith("# asked")
    assert one.rationale == "hand translation"
    assert two.operator == "tune" and two.parents == (first.id,) and two.data["replay_of"] == second.id
    assert two.candidate.source_hash == tuned.candidate.source_hash
    assert end.status == EMPTY
