"""Typed values that cross the evaluation's process boundaries (parent -> judge -> runner and back)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine import jsonable

# The timing loop's parameters are the config's `[timing]` section itself, carried as they are
from engine.config.sections import TimingParams
from engine.config.sections import GPU_KEEP
from engine.harness.timing import TimingStats


@dataclass(frozen=True)
class CandidateSpec:
    """What the runner loads: a built extension (.so) or a KernelBench .py (and its prebuilt extensions)."""
    format: str
    module_name: str
    so_path: str | None = None
    py_path: str | None = None            # a KernelBench .py, or a Triton candidate's folder
    torch_extensions: str | None = None   # a KernelBench candidate's load_inline build folder, if prebuilt


@dataclass(frozen=True)
class TimerSpec:
    so_path: str
    module_name: str


@dataclass
class SessionBaseline:
    """One config's baselines as measured earlier in the session (engine/pipeline/baselines.py) or by an earlier
    `kbench eval` on the same GPU (engine/pipeline/baseline_cache.py), carried back to the judge."""
    eager: TimingStats | None = None
    compile: TimingStats | None = None
    compile_error: str | None = None
    measured_at: float | None = None    # wall clock (seconds since the epoch), kept for the disk cache's entries


@dataclass(frozen=True)
class JudgeRequest:
    task: dict[str, Any]
    direction: str
    candidate: CandidateSpec
    timer: TimerSpec
    result_path: str
    configs: list[str] | None = None
    # None: time every config checked. evaluate() fills it from engine.tasks.model.timing_selection (by default
    # the task's `bench` and `timed` configs), so every path that evaluates gets the same choice.
    timing_configs: list[str] | None = None
    trials: int = 2
    timing: bool = True
    baselines: tuple[str, ...] = ("eager", "compile")
    timing_params: TimingParams = TimingParams()
    integrity: bool = True
    deadline_s: float = 600.0    # the judge's own budget; the parent kills its group a little later
    # per config, its baselines as measured earlier in this session on this GPU (engine/pipeline/baselines.py):
    # reused after a quick re-timing agrees, instead of timing eager, torch.compile and the null loop again
    session_baselines: dict[str, SessionBaseline] | None = None
    gpu: int | None = None
    # baselines an earlier evaluation kept on disk (engine/pipeline/baseline_cache.py), by the GPU they were
    # measured on (DeviceInfo.key()): the judge takes those of its own GPU where the session has none for a config,
    # after the same quick re-timing, and ignores every other GPU's
    cached_baselines: dict[str, dict[str, SessionBaseline]] | None = None
    # the numeric settings (engine.harness.numerics.Numerics.to_json()) the judge and its runner evaluate under;
    # None: the judge's own (JUDGE). The upstream mode sends torch's defaults (engine/pipeline/eval_mode.py).
    numerics: dict[str, Any] | None = None
    # the upstream mode on an imported robust-kbench or KernelBench task: the trials' seeds and draws as upstream's
    # own evaluation makes them (engine.pipeline.judge.configs.upstream_trial_seeds, TaskRuntime.upstream_draws)
    upstream_draws: bool = False
    # a call that misses the task-dtype reference is compared again with the reference in float64
    # (engine/pipeline/judge/exact.py); off in the upstream mode, whose benchmarks compare with the float32 one only
    float64_opinion: bool = True
    # the share of the GPU's memory the judge may fill with prepared variants before it parks a config's variants in
    # host memory (engine/pipeline/judge/parking.py); 0 parks every one (the least GPU memory, the slowest check)
    gpu_keep: float = GPU_KEEP

    def to_json(self) -> dict[str, Any]:
        return jsonable.dump(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any], what: str = "the judge's request") -> "JudgeRequest":
        return jsonable.load(cls, obj, what)


@dataclass
class CorrectnessResult:
    ok: bool
    reason: str = ""
    trials: int = 0
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    seconds: float = 0.0


@dataclass
class IntegrityResult:
    ok: bool
    hack: str | None = None
    reason: str = ""
    checks: list[str] = field(default_factory=list)
