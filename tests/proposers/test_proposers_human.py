"""The human proposer with a scripted $EDITOR: a small Python script stands in for the person."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from tests.paths import LLM_FIXTURES
from tests.proposers.conftest import req

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import BINDING, layernorm, parent_candidate  # noqa: E402,F401

from engine.proposers import ProposalStatus  # noqa: E402
from engine.proposers.human import RATIONALE, HumanProposer  # noqa: E402

OK, FAILED, EMPTY, STOP = (ProposalStatus.OK, ProposalStatus.FAILED, ProposalStatus.EMPTY, ProposalStatus.STOP)


def script(tmp_path: Path, body: str) -> str:
    """An editor command: python <script> FILE... ; the body sees `files` (list of Path) and `cwd`."""
    path = tmp_path / "editor.py"
    path.write_text("import sys, os\nfrom pathlib import Path\nfiles = [Path(f) for f in sys.argv[1:]]\n"
                    "cwd = Path(os.getcwd())\n" + body)
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"


def test_edit_becomes_a_candidate(tmp_path, layernorm):
    log = tmp_path / "argv.txt"
    editor = script(tmp_path, f"""
Path({str(log)!r}).write_text("\\n".join(p.name for p in files))
k = cwd / "kernel.cu"
k.write_text(k.read_text().replace("#define BLOCK_SIZE 256 ", "#define BLOCK_SIZE 128 "))
r = cwd / "RATIONALE.md"
r.write_text(r.read_text() + "Smaller blocks: more rows in flight.\\n")
assert (cwd / "reference.py").read_text().startswith('\"\"\"LayerNorm')
""")
    tmp_root = tmp_path / "edits"
    tmp_root.mkdir()
    parent = parent_candidate()
    p = HumanProposer(env={"EDITOR": editor}, tmp_root=tmp_root).propose(req(layernorm, "mutate", parent))
    assert p.status == OK and p.proposer == "human" and p.operator == "mutate"
    c = p.candidate
    assert set(c.files) == {"kernel.cu", "binding.cpp"}  # reference.py and RATIONALE.md are not candidate files
    assert "#define BLOCK_SIZE 128 " in c.files["kernel.cu"] and c.files["binding.cpp"] == BINDING
    assert c.meta["proposer"] == "human" and c.meta["parents"] == [parent.source_hash]
    assert p.rationale == "Smaller blocks: more rows in flight." and c.meta["rationale"] == p.rationale
    assert c.name == "ln-parent-edit" and "kernel.cu" in p.answer
    assert log.read_text().split("\n") == ["kernel.cu", "binding.cpp", RATIONALE]  # kernel first, notes last
    assert list(tmp_root.iterdir()) == []  # the temporary copy is gone


def test_visual_wins_over_editor(tmp_path, layernorm):
    visual = script(tmp_path, "k = cwd / 'kernel.cu'; k.write_text(k.read_text() + '// touched\\n')\n")
    p = HumanProposer(env={"VISUAL": visual, "EDITOR": "false"}).propose(req(layernorm, "mutate", parent_candidate()))
    assert p.status == OK and p.rationale == "edited by hand"


def test_unchanged_gives_no_proposal(tmp_path, layernorm):
    tmp_root = tmp_path / "edits"
    tmp_root.mkdir()
    p = HumanProposer(env={"EDITOR": "true"}, tmp_root=tmp_root).propose(req(layernorm, "mutate", parent_candidate()))
    assert p.status == EMPTY and "not changed" in p.reason and list(tmp_root.iterdir()) == []


def test_editor_failure_keeps_the_files(tmp_path, layernorm):
    editor = script(tmp_path, "(cwd / 'kernel.cu').write_text('half done')\nsys.exit(3)\n")
    p = HumanProposer(env={"EDITOR": editor}, tmp_root=tmp_path).propose(req(layernorm, "mutate", parent_candidate()))
    assert p.status == FAILED and "status 3" in p.reason
    kept = Path(p.reason.rsplit("the files are in ", 1)[1])
    assert (kept / "kernel.cu").read_text() == "half done"  # nothing the user typed is lost


def test_missing_editor_program(tmp_path, layernorm):
    p = HumanProposer(editor=str(tmp_path / "no-such-editor")).propose(req(layernorm, "mutate", parent_candidate()))
    assert p.status == FAILED and "cannot start the editor" in p.reason


def test_unreadable_result_keeps_the_files(tmp_path, layernorm):
    editor = script(tmp_path, "(cwd / 'binding.cpp').unlink()\n")
    p = HumanProposer(env={"EDITOR": editor}, tmp_root=tmp_path).propose(req(layernorm, "mutate", parent_candidate()))
    assert p.status == FAILED and "cannot tell the candidate format" in p.reason and "kbench-edit-" in p.reason


def test_new_header_and_backup_files(tmp_path, layernorm):
    editor = script(tmp_path, "(cwd / 'reduce.cuh').write_text('#pragma once\\n')\n"
                              "(cwd / 'kernel.cu~').write_text('backup')\n"
                              "(cwd / 'notes.txt').write_text('scratch')\n")
    p = HumanProposer(env={"EDITOR": editor}).propose(req(layernorm, "mutate", parent_candidate()))
    assert p.status == OK and set(p.candidate.files) == {"kernel.cu", "binding.cpp", "reduce.cuh"}


def test_translate_from_a_skeleton(tmp_path, layernorm):
    editor = script(tmp_path, "k = cwd / 'kernel.cu'; k.write_text(k.read_text().replace('// TODO: the computation', ''))\n")
    p = HumanProposer(env={"EDITOR": editor}).propose(req(layernorm, "translate"))
    assert p.status == OK and p.operator == "translate" and p.parents == ()
    assert p.candidate.format == "native" and "PYBIND11_MODULE" in p.candidate.files["binding.cpp"]
    assert p.candidate.name == "hand-written"


def test_known_edit_is_empty(tmp_path, layernorm):
    editor = script(tmp_path, "k = cwd / 'kernel.cu'; k.write_text(k.read_text() + '// x\\n')\n")
    parent = parent_candidate()
    first = HumanProposer(env={"EDITOR": editor}).propose(req(layernorm, "mutate", parent))
    again = HumanProposer(env={"EDITOR": editor}).propose(
        req(layernorm, "mutate", parent, known_hashes=frozenset({first.candidate.source_hash})))
    assert again.status == EMPTY and "already has" in again.reason


def test_no_editor_configured(layernorm):
    h = HumanProposer(env={})
    assert not h.available() and "$EDITOR" in h.unavailable_reason()
    p = h.propose(req(layernorm, "mutate", parent_candidate()))
    assert p.status == STOP and "$VISUAL or $EDITOR" in p.reason
    assert HumanProposer(env={"EDITOR": "vi"}).available()


def test_two_parents_are_refused(layernorm):
    p = HumanProposer(editor="true").propose(req(layernorm, "mutate", parent_candidate(), parent_candidate("b")))
    assert p.status == FAILED and "one parent" in p.reason
