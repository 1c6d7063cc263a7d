"""An override may change a verdict, never invent a measurement; a folder checked with `kbench eval` can be
exported on that verdict; exports land under the workspace, not in the current directory. CPU only."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from engine.candidates import load_candidate
from engine.cli import main
from engine.eval_records import lookup, record
from engine.export import ExportError, plan_from_dirs, plan_from_workspace, write_package
from engine.pipeline.eval_types import EvalReport
from engine.pipeline.verdicts import NO_GPU_REASON
from engine.tasks.loader import load_task
from engine.verdict import Status, Verdict
from engine.workspace import ConfigTiming, Measurement
from tests.paths import REPO

LN_FWD = REPO / "tasks" / "layernorm_lastdim" / "baselines" / "forward"
SM_FWD = REPO / "tasks" / "softmax" / "baselines" / "forward"


def _compiled_without_gpu(ws, cid):
    """What an evaluation on a machine without a GPU leaves: compiled, correctness and timing never ran."""
    ws.record_verdicts(cid, [Verdict("compile", Status.PASS, "compiled"),
                             Verdict("correctness", Status.SKIPPED, NO_GPU_REASON),
                             Verdict("timing", Status.SKIPPED, NO_GPU_REASON)])


def test_override_of_a_check_that_never_ran_does_not_make_it_exportable(ln_ws, tmp_path, capsys):
    cid = ln_ws.commit_candidate("ln", load_candidate(LN_FWD)).id
    _compiled_without_gpu(ln_ws, cid)
    ln_ws.override(cid, "correctness", "pass", "I trust it", by="newcomer")
    assert ln_ws.status(cid).status_of("correctness") is Status.PASS   # the verdict did change
    with pytest.raises(ExportError) as exc:
        plan_from_workspace(ln_ws, cid, with_backward=False)
    msg = str(exc.value)
    assert "never measured on a GPU" in msg and "override by newcomer ('I trust it')" in msg
    assert "an override may change a verdict, never invent a measurement" in msg
    assert f"kbench reevaluate {cid}" in msg and "--force" in msg
    # the CLI says the same and writes nothing
    out = tmp_path / "out"
    assert main(["export", cid, "--workspace", str(ln_ws.path), "--out", str(out), "--no-backward"]) == 2
    assert "never measured on a GPU" in capsys.readouterr().err and not out.exists()
    # --force exports it, and the README does not call it passing
    plan = plan_from_workspace(ln_ws, cid, with_backward=False, force=True)
    write_package(plan, out)
    readme = (out / "README.md").read_text()
    assert "WARNING: exported with --force" in readme and "NOT passing: it was never measured on a GPU" in readme


def test_override_with_no_correctness_check_at_all_is_refused(ln_ws):
    cid = ln_ws.commit_candidate("ln", load_candidate(LN_FWD)).id
    ln_ws.override(cid, "correctness", "pass", "looks right", by="newcomer")
    with pytest.raises(ExportError, match="never measured on a GPU: it has no correctness check; the `pass` is an "
                                          "override"):
        plan_from_workspace(ln_ws, cid, with_backward=False)


def test_override_of_a_measured_failure_may_change_the_verdict(ln_ws):
    """A check that ran and failed (a tolerance a person judges too tight) may be overruled: that changes a
    verdict, it invents nothing."""
    cid = ln_ws.commit_candidate("ln", load_candidate(LN_FWD)).id
    ln_ws.record_verdicts(cid, [Verdict("compile", Status.PASS, "compiled"),
                                Verdict("correctness", Status.FAIL, "wide-rows: max abs err 2e-5 > 1e-5")])
    ln_ws.record_measurement(cid, Measurement(1.3, 0.9, (ConfigTiming("bench", 0.1, 0.001, 0.13, 0.09),),
                                              gpu="NVIDIA H100", driver="580", torch="2.14", cuda="13.0"))
    ln_ws.override(cid, "correctness", "pass", "2e-5 is within fp32 summation-order noise here", by="newcomer")
    plan = plan_from_workspace(ln_ws, cid, with_backward=False)
    assert plan.forward.passing and not plan.forced


# --------------------------------------------------------------------------------- folders and `kbench eval`


def _report(task, candidate, correctness: Verdict, gpu: str = "NVIDIA H100 80GB HBM3") -> EvalReport:
    return EvalReport(task.name, "forward", candidate.source_hash, candidate.format,
                      [Verdict("static", Status.PASS, "clean"), Verdict("compile", Status.PASS, "compiled"),
                       correctness, Verdict("timing", Status.PASS, "1.9x")], [], {"gpu": gpu}, {})


def test_a_folder_evaluated_with_kbench_eval_exports_on_that_verdict(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path / "cache"))
    task = load_task("softmax")
    folder = tmp_path / "mine"
    shutil.copytree(SM_FWD, folder)
    cand = load_candidate(folder)
    with pytest.raises(ExportError, match=r"no GPU verdict is recorded for these exact sources: .*; run `kbench eval "):
        plan_from_dirs(folder, "softmax")
    # no GPU: nothing is known, nothing is recorded
    skipped = _report(task, cand, Verdict("correctness", Status.SKIPPED, NO_GPU_REASON))
    assert record(skipped, task, "forward", cand, tmp_path / "cache", subset=False) is None
    assert lookup(task, "forward", cand, tmp_path / "cache")[0] is None
    # a passing evaluation on every config is what export relies on
    rec = record(_report(task, cand, Verdict("correctness", Status.PASS, "7 configs x 2 trials")), task, "forward",
                 cand, tmp_path / "cache", subset=False)
    assert rec is not None and rec.passing
    plan = plan_from_dirs(folder, "softmax")
    assert plan.forward.passing and not plan.forced
    assert "kbench eval on NVIDIA H100 80GB HBM3" in plan.forward.origin
    # any edit of the sources makes the record irrelevant
    (folder / "kernel.cu").write_text((folder / "kernel.cu").read_text() + "\n// tweak\n")
    with pytest.raises(ExportError, match="no GPU verdict is recorded for these exact sources"):
        plan_from_dirs(folder, "softmax")


def test_a_recorded_eval_is_tied_to_the_task_version_and_to_every_config(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path / "cache"))
    task_dir = tmp_path / "softmax"
    shutil.copytree(REPO / "tasks" / "softmax", task_dir)
    task = load_task(task_dir)
    cand = load_candidate(SM_FWD)
    passing = _report(task, cand, Verdict("correctness", Status.PASS, "ok"))
    # only some configs checked: recorded, but not enough for export
    assert not record(passing, task, "forward", cand, tmp_path / "cache", subset=True).passing
    with pytest.raises(ExportError, match="checked only the configs named with --config"):
        plan_from_dirs(SM_FWD, task_dir, name="x")
    assert record(passing, task, "forward", cand, tmp_path / "cache", subset=False).passing
    assert plan_from_dirs(SM_FWD, task_dir, name="x").forward.passing
    # the task's tolerance changes: the old verdict no longer counts
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("rtol = 1e-5", "rtol = 1e-6", 1))
    with pytest.raises(ExportError, match="against another version of task softmax"):
        plan_from_dirs(SM_FWD, task_dir, name="x")


# ---------------------------------------------------------------------------------------- where exports land


def test_exports_default_to_the_workspace_not_the_current_directory(ln_ws, tmp_path, monkeypatch, capsys):
    cid = ln_ws.commit_candidate("ln", load_candidate(LN_FWD)).id
    ln_ws.record_verdicts(cid, [Verdict("compile", Status.PASS, "compiled"), Verdict("correctness", Status.PASS, "ok")])
    here = tmp_path / "checkout"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main(["export", cid, "--workspace", str(ln_ws.path), "--no-backward"]) == 0
    out = capsys.readouterr().out
    pkg = ln_ws.path / "exports" / "kbench_layernorm_lastdim"
    assert f"package {pkg}/" in out and (pkg / "pyproject.toml").is_file()
    assert list(here.iterdir()) == []                      # nothing in the current directory
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    status = subprocess.run(["git", "status", "--porcelain"], cwd=ln_ws.path, capture_output=True, text=True, env=env)
    assert status.stdout == ""                             # the workspace repository ignores its exports


def test_folder_export_without_a_workspace_creates_one_to_hold_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KBENCH_WORKSPACE", str(tmp_path / "kb-ws"))
    assert main(["export", "--from-dir", str(SM_FWD), "--task", "softmax", "--no-backward"]) == 0
    assert (tmp_path / "kb-ws" / ".git").is_dir()
    assert (tmp_path / "kb-ws" / "exports" / "kbench_softmax" / "setup.py").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kb-ws"]
