"""Typed values that cross the evaluation's process boundaries (parent -> judge -> runner and back)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine import jsonable
from engine.gpu_wait import NO_GPU  # noqa: F401 - JudgeResult.error where torch finds no GPU, re-exported


@dataclass(frozen=True)
class CandidateSpec:
    """What the runner loads: a built extension (.so) or a KernelBench .py (and its prebuilt extensions)."""
    format: str
    module_name: str
    so_path: str | None = None
    py_path: str | None = None
    torch_extensions: str | None = None   # a KernelBench candidate's load_inline build folder, if prebuilt


@dataclass(frozen=True)
class TimerSpec:
    so_path: str
    module_name: str


@dataclass(frozen=True)
class TimingParams:
    warmup: int = 5
    min_iters: int = 20
    max_iters: int = 2000
    budget_s: float = 0.4       # measured time per callable, after warm-up
    flush_l2: bool = True
    checks: int = 3             # timed iterations whose outputs go to the judge, drawn at random

    @classmethod
    def from_options(cls, options: dict[str, Any] | None) -> "TimingParams":
        return jsonable.load(cls, options or {}, "the timing options")


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
    session_baselines: dict[str, dict[str, Any]] | None = None
    gpu: int | None = None

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


@dataclass
class JudgeResult:
    """What the judge writes to its result file after every step (so a killed judge still says where it was)."""
    finished: bool = False
    progress: dict[str, Any] | None = None
    device: dict[str, Any] | None = None
    jail: dict[str, Any] | None = None
    correctness: dict[str, dict[str, Any]] = field(default_factory=dict)
    timing: dict[str, dict[str, Any]] = field(default_factory=dict)
    integrity: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    traces: dict[str, str] = field(default_factory=dict)   # kbench's own failures, for a bug report
    warm: bool = False     # a spare judge: started (runner jailed, CUDA up) before this request came
    baseline_drift: dict[str, dict[str, Any]] = field(default_factory=dict)  # session baselines that moved
    # set when the judge itself could not go on (its own GPU memory ran out on a shared or small GPU): what it
    # did not finish is not a verdict on the kernel, and an evolution evaluates the candidate again
    unmeasured: str | None = None
    # set when a clock check failed while NVML saw other processes run work on this GPU (engine.pipeline.contention)
    gpu_shared: str | None = None

    def to_json(self) -> dict[str, Any]:
        return jsonable.dump(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any] | None, what: str = "the judge's result file") -> "JudgeResult":
        return jsonable.load(cls, obj or {}, what)
