"""`kbench sessions | log | show-candidate | diff | checkout | override | init-workspace`."""

from __future__ import annotations

import json

import pytest

from engine.candidates import Candidate
from engine.cli import main
from engine.verdict import Status, Verdict
from engine.workspace import ConfigTiming, Measurement, Workspace
from tests.conftest import cli
from tests.workspace.git_helpers import git


@pytest.fixture
def populated(tmp_path, layernorm_task):
    path = tmp_path / "ws"
    with Workspace.create(path) as ws:
        ws.start_session("ln", layernorm_task, proposer="anthropic", model="claude-test")
        mk = lambda t: Candidate("native", {"kernel.cu": f"// {t}\n", "binding.cpp": "// glue\n"}, t,
                                 {"rationale": f"because {t}"})
        a = ws.commit_candidate("ln", mk("warp per row"), prompt="translate it")
        b = ws.commit_candidate("ln", mk("float4 loads"), parents=[a.id])
        ws.commit_candidate("ln", mk("merge"), parents=[a.id, b.id])
        ws.record_verdicts(a.id, [Verdict("compile", Status.PASS), Verdict("correctness", Status.PASS)])
        ws.record_measurement(a.id, Measurement(1.25, 0.8, (ConfigTiming("odd-37x1000", 0.02, 0.001, 0.025, 0.016),),
                                                gpu="NVIDIA H100", driver="550", torch="2.5", cuda="12.4"))
        ws.record_verdicts(b.id, [Verdict("compile", Status.PASS), Verdict("correctness", Status.FAIL, "nan")])
    return path


def test_sessions_table_and_json(populated, capsys):
    rc, out, _ = cli(capsys, "--workspace", str(populated), "sessions")
    assert rc == 0
    assert "ln" in out and "layernorm" in out and "ln-g0-1" in out and "3" in out
    rc, out, _ = cli(capsys, "sessions", "--json", "--workspace", str(populated))  # option after the command
    data = json.loads(out)
    assert data["sessions"][0]["name"] == "ln" and data["sessions"][0]["candidates"] == 3
    assert data["sessions"][0]["best"] == "ln-g0-1"


def test_log_rows_and_json(populated, capsys):
    rc, out, _ = cli(capsys, "--workspace", str(populated), "log", "ln")
    assert rc == 0
    lines = out.splitlines()[1:]  # after the session header
    row = next(l for l in lines if "ln-g0-1" in l)
    assert row.startswith(">") and "translate" in row and "1.25x" in row and "0.80x" in row
    row_b = next(l for l in lines if "ln-g1-1" in l)
    assert "mutate" in row_b and " x " in row_b and "float4 loads" in row_b
    assert any("ln-g2-1" in l and "crossover" in l for l in lines)
    assert "overridden" in lines[-1]  # the legend
    rc, out, _ = cli(capsys, "--workspace", str(populated), "log", "ln", "--json")
    data = json.loads(out)
    rows = {r["id"]: r for r in data["candidates"]}
    assert [r["id"] for r in data["candidates"]] == ["ln-g0-1", "ln-g1-1", "ln-g2-1"]
    assert rows["ln-g0-1"]["verdicts"] == {"compile": "pass", "correctness": "pass"}
    assert rows["ln-g0-1"]["speedup_eager"] == 1.25 and rows["ln-g1-1"]["verdicts"]["correctness"] == "fail"
    assert rows["ln-g2-1"]["parents"] == ["ln-g0-1", "ln-g1-1"] and rows["ln-g2-1"]["generation"] == 2
    rc, out, _ = cli(capsys, "--workspace", str(populated), "log", "ln", "-g", "1", "--json")
    assert [r["id"] for r in json.loads(out)["candidates"]] == ["ln-g1-1"]


def test_show_candidate(populated, capsys):
    rc, out, _ = cli(capsys, "--workspace", str(populated), "show-candidate", "ln-g0", "--prompt")
    assert rc == 0
    assert "candidate  ln-g0-1" in out and "because warp per row" in out and "translate it" in out
    assert "1.25x vs eager" in out and "NVIDIA H100" in out and "driver 550" in out and "odd-37x1000" in out
    rc, out, _ = cli(capsys, "--workspace", str(populated), "show-candidate", "ln-g2-1", "--json")
    data = json.loads(out)
    assert data["candidate"]["parents"] == ["ln-g0-1", "ln-g1-1"]
    assert data["lineage"] == ["ln-g2-1", "ln-g0-1", "ln-g1-1"] and data["files"] == ["binding.cpp", "kernel.cu"]


def test_diff_and_checkout(populated, capsys, tmp_path):
    rc, out, _ = cli(capsys, "--workspace", str(populated), "diff", "ln-g0-1", "ln-g1-1")
    assert rc == 0 and "-// warp per row" in out and "+// float4 loads" in out
    rc, out, _ = cli(capsys, "--workspace", str(populated), "diff", "ln-g0-1", "ln-g1-1", "--stat")
    assert "kernel.cu" in out and "changed" in out
    dest = tmp_path / "co"
    rc, out, _ = cli(capsys, "--workspace", str(populated), "checkout", "ln-g1-1", str(dest))
    assert rc == 0 and (dest / "kernel.cu").read_text() == "// float4 loads\n"
    rc, _, err = cli(capsys, "--workspace", str(populated), "checkout", "ln-g0-1", str(dest))
    assert rc == 2 and "would overwrite" in err and (dest / "kernel.cu").read_text() == "// float4 loads\n"


def test_override_through_the_cli_is_a_note(populated, capsys):
    rc, out, _ = cli(capsys, "--workspace", str(populated), "override", "ln-g1-1", "correctness", "pass",
                     "--reason", "NaN came from the reference, not the kernel", "--by", "Ada")
    assert rc == 0 and "correctness fail -> pass" in out
    sha = git(populated, "rev-parse", "refs/kbench/ln/ln-g1-1").strip()
    last = json.loads(git(populated, "notes", "--ref", "kbench", "show", sha).splitlines()[-1])
    assert last == {**last, "kind": "override", "stage": "correctness", "from": "fail", "to": "pass", "by": "Ada",
                    "reason": "NaN came from the reference, not the kernel"}
    rc, out, _ = cli(capsys, "--workspace", str(populated), "log", "ln", "--json")
    row = {r["id"]: r for r in json.loads(out)["candidates"]}["ln-g1-1"]
    assert row["verdicts"]["correctness"] == "pass" and row["overridden"] == ["correctness"]
    rc, _, err = cli(capsys, "--workspace", str(populated), "override", "ln-g1-1", "correctness", "pass",
                     "--reason", "again")
    assert rc == 2 and "already pass" in err
    with pytest.raises(SystemExit):  # argparse refuses anything but pass|fail, and a missing --reason
        main(["--workspace", str(populated), "override", "ln-g1-1", "correctness", "maybe", "--reason", "x"])
    with pytest.raises(SystemExit):
        main(["--workspace", str(populated), "override", "ln-g1-1", "correctness", "fail"])


def test_init_workspace(tmp_path, capsys):
    target = tmp_path / "fresh"
    rc, out, _ = cli(capsys, "--workspace", str(target), "init-workspace")
    assert rc == 0 and git(target, "config", "kbench.workspace").strip() == "1"
    rc, out, _ = cli(capsys, "--workspace", str(target), "sessions")
    assert rc == 0 and "no sessions yet" in out


def test_default_workspace_is_cwd_workspace(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _, err = cli(capsys, "sessions")
    assert rc == 2 and "no workspace here" in err and not (tmp_path / "workspace").exists()
    rc, out, _ = cli(capsys, "init-workspace")
    assert rc == 0 and (tmp_path / "workspace" / ".git").is_dir()
