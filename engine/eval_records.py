"""What `kbench eval` found for a candidate folder, kept so that `kbench export --from-dir` can rely on it.

A workspace candidate carries its verdicts in git notes; a folder has nowhere to keep them, so the export
of a folder used to need --force even right after a passing `kbench eval`, and its advice ("evaluate it
first") could not be followed. Each evaluation that really checked correctness (on a GPU) is written to
`$KBENCH_CACHE/evals/<task>-<direction>-<source hash>.json`. The key is the candidate's source hash, so any
edit of the folder makes the record irrelevant; the record also holds a fingerprint of the task (its
reference text, tolerances and configs), so a changed task does not inherit an old verdict.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.verdict import Stage, Status
from engine.workspace.records import now_iso

if TYPE_CHECKING:
    from engine.candidates import Candidate
    from engine.pipeline.eval_types import EvalReport
    from engine.tasks.model import Task

SCHEMA = 1


@dataclass(frozen=True)
class RecordedEval:
    task: str
    direction: str
    source_hash: str
    task_fingerprint: str
    passing: bool                      # EvalReport.passed (engine.verdict.judge) on every config
    summary: str                       # one line: what it found
    gpu: str
    at: str
    speedup_eager: float | None = None
    verdicts: list[dict[str, Any]] = field(default_factory=list)


def task_fingerprint(task: Task) -> str:
    """The parts of a task a verdict depends on: its reference code, tolerances, dtype and configs."""
    obj = task.to_json()
    refs = {}
    for d, spec in obj["directions"].items():
        try:
            refs[d] = hashlib.sha256(Path(spec.pop("reference_path")).read_bytes()).hexdigest()
        except OSError:
            refs[d] = "unreadable"
    obj.pop("root", None)
    obj["references"] = refs
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _path(root: Path, task: str, direction: str, source_hash: str) -> Path:
    return root / "evals" / f"{task}-{direction}-{source_hash}.json"


def record(report: EvalReport, task: Task, direction: str, candidate: Candidate, root: Path,
           subset: bool) -> RecordedEval | None:
    """Keep `report` (engine.pipeline.evaluate.EvalReport) where correctness was really checked; None where it
    was not (no GPU: nothing is known about the kernel, and an older record stays)."""
    corr = report.verdict(Stage.CORRECTNESS)
    if corr is None or corr.status is Status.SKIPPED:
        return None
    j = report.judgement
    passing = j.passed and not subset
    if subset:
        summary = "checked only the configs named with --config (export needs every config)"
    elif j.blocked_by:
        bad = report.verdict(j.blocked_by[0])
        summary = f"{bad.stage} {bad.status.value}: {bad.reason}"
    else:
        summary = "passed" if passing else j.why_not_passed
    rec = RecordedEval(task.name, direction, candidate.source_hash, task_fingerprint(task), passing, summary,
                       str((report.device or {}).get("gpu") or ""), now_iso(), report.geomean_speedup_eager,
                       [v.to_json() for v in report.verdicts])
    path = _path(root, task.name, direction, candidate.source_hash)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".eval-")
    with os.fdopen(fd, "w") as f:
        json.dump({"v": SCHEMA, **asdict(rec)}, f, indent=1)
    os.replace(tmp, path)
    return rec


def lookup(task: Task, direction: str, candidate: Candidate, root: Path) -> tuple[RecordedEval | None, str]:
    """(the recorded evaluation of this exact source against this exact task, or None; why none)."""
    path = _path(root, task.name, direction, candidate.source_hash)
    try:
        obj = json.loads(path.read_text())
        obj.pop("v", None)
        rec = RecordedEval(**obj)
    except FileNotFoundError:
        return None, ("no GPU verdict is recorded for these exact sources: a `kbench eval` that checked their "
                      "correctness on a GPU is what counts (one without a GPU only compiled them, which says "
                      "nothing about their results, and records nothing)")
    except (OSError, ValueError, TypeError) as exc:
        return None, f"its recorded evaluation {path} cannot be read ({exc})"
    if rec.task_fingerprint != task_fingerprint(task):
        return None, (f"its recorded evaluation ({rec.at}) was against another version of task {task.name} "
                      "(reference, tolerances or configs changed since)")
    return rec, ""
