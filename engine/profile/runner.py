"""The profile stage's options and verdict: ncu on the candidate's kernels for one representative config, plus
the torch profiler's top device ops for the candidate and the reference, as one `profile` Verdict, and what of
it goes back into a prompt. Running the candidate under the profilers (jailed, like a runner) is
engine/pipeline/profiling.py.

ncu missing, or not permitted (ERR_NVGPUCTRPERM), makes the verdict `skipped` with the reason; the torch
profiler part still runs and is kept in the verdict's data."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from engine.profile.summarise import ProfileSummary
from engine.tasks.model import BENCH_CONFIG, default_timing_configs
from engine.verdict import Stage, Status, Verdict

if TYPE_CHECKING:
    from engine.tasks.model import Task
    from engine.workspace import StageState

STAGE = Stage.PROFILE


@dataclass
class ProfileOptions:
    enabled: bool = True             # run after timing for candidates that pass
    config: str | None = None        # default: representative_config's choice
    launch_count: int = 3
    ncu: str | None = None           # ncu executable (default: found on PATH)
    ncu_timeout_s: float = 300
    torch_timeout_s: float = 180
    gpu: int | None = None


def representative_config(task: Task, wanted: str | None = None) -> str:
    """`wanted`, else a config the evaluation times by default (engine.tasks.model.default_timing_configs):
    `bench` where the task has one, else the last of them; the task's last config where none is timed by
    default (every config is timed then)."""
    names = [c.name for c in task.configs]
    if wanted:
        if wanted not in names:
            raise ValueError(f"task {task.name} has no config {wanted!r} (has: {', '.join(names)})")
        return wanted
    timed = default_timing_configs(task) or names
    return BENCH_CONFIG if BENCH_CONFIG in timed else timed[-1]


def profile_verdict(summary: ProfileSummary, torch_error: str = "") -> Verdict:
    data = {"summary": summary.to_json(), "text": summary.to_text()}
    if torch_error:
        data["torch_error"] = torch_error
    if summary.ncu_skipped:
        return Verdict(STAGE, Status.SKIPPED, summary.ncu_skipped, data)
    return Verdict(STAGE, Status.PASS, f"{summary.bottleneck}-bound", data)


def profile_feedback(stages: Mapping[str, StageState] | None) -> str:
    """The profile text for a prompt from a candidate's stages (`CandidateStatus.stages`), or ""."""
    st = stages.get(STAGE) if stages else None
    v = st.verdict.verdict if st is not None and st.verdict is not None else None
    return str(v.data.get("text") or "") if v is not None else ""


def summaries_from(verdicts: Sequence[Verdict]) -> list[ProfileSummary]:
    return [ProfileSummary.from_json(v.data["summary"]) for v in verdicts
            if v.stage == STAGE and isinstance(v.data.get("summary"), dict)]
