"""The judge's result file, typed: what the judge writes after every step and the parent reads back.

The judge (a trusted process of kbench's own) fills a JudgeResult; the parent reads it back with
`JudgeResult.from_json` once the judge has ended (`JudgeOutcome.of`), so verdicts, the session's baselines and
the contention rule read fields, not dict keys. Each config has one entry per kind: its correctness
(CorrectnessResult), its integrity findings (IntegrityResult, also under `<config>@timing` and
`@result-channel`) and its timing (TimingRow).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine import jsonable
from engine.errors import DataError
from engine.harness.numerics import Numerics
from engine.harness.timing import TimingStats
from engine.jail import JailReport
from engine.pipeline.protocol.types import CorrectnessResult, IntegrityResult, SessionBaseline
from engine.tasks.model import Cost

if TYPE_CHECKING:
    from engine.procs import ChildOutcome


class Stop(Exception):
    """The evaluation ends here; the result file already says why."""


@dataclass
class Progress:
    """Where the judge is: the stage and, within one, the config."""
    stage: str
    config: str | None = None
    t: float = 0.0

    def where(self) -> str:
        """" during timing of config bench" (with a leading space), for error messages."""
        return f" during {self.stage}" + (f" of config {self.config}" if self.config else "")


@dataclass
class DeviceInfo:
    """The GPU the judge measured on (engine.harness.device_info.gpu_info); `gpu` is None without one."""
    torch: str | None = None
    cuda: str | None = None
    gpu: str | None = None
    capability: str | None = None
    sms: int | None = None
    memory_gb: float | None = None
    l2_mb: float | None = None
    driver: str | None = None
    uuid: str | None = None     # tells two GPUs of one model apart

    def identity(self) -> tuple[str, ...]:
        """What must match for one GPU's baselines to serve another request."""
        return tuple(str(v) for v in (self.gpu, self.driver, self.torch, self.cuda, self.uuid))

    def key(self) -> str:
        """identity() as one string: how the disk cache of baselines files a GPU's entries (JudgeRequest's
        `cached_baselines`)."""
        return " | ".join(self.identity())

    def as_report(self) -> dict[str, Any]:
        """The form EvalReport.device, the notes and the app keep: only what is known."""
        return {k: v for k, v in jsonable.dump(self).items() if v is not None or k == "gpu"}


@dataclass
class NullLoop:
    """The timing protocol's own cost on this GPU: the loop calling nothing, with the candidate's arguments."""
    median_ms: float
    gap_ms: float | None = None


@dataclass
class Recheck:
    """A session baseline re-timed quickly before it is reused (or found to have drifted)."""
    baseline: str
    now_ms: float
    session_ms: float


# BaselineOrigin.source: timed for this request, reused from the session, or from the disk cache
MEASURED, REUSED, CACHED = "measured", "session", "cache"


@dataclass
class BaselineOrigin:
    """Whether a row's baselines were timed for this request, or reused from the session or the disk cache after
    a re-check."""
    source: str                        # MEASURED, REUSED or CACHED
    recheck: Recheck | None = None
    measured_at: float | None = None   # CACHED: when they were measured (SessionBaseline.measured_at)


@dataclass
class TimingRow:
    """One config's timing: the candidate's statistics with what the judge checked, and the baselines. An
    `error` row has no statistics (the job raised, or its record stream was forged)."""
    candidate: TimingStats | None = None
    error: str | None = None
    hidden_work: bool = False          # the device-wide end lagged the stream's end event
    witness: dict[str, Any] = field(default_factory=dict)    # the clock check's figures
    checked: list[int] = field(default_factory=list)         # timed iterations whose outputs were checked
    null: NullLoop | None = None
    baselines: BaselineOrigin | None = None
    eager: TimingStats | None = None
    compile: TimingStats | None = None
    compile_error: str | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None

    def session_baseline(self) -> SessionBaseline:
        return SessionBaseline(self.eager, self.compile, self.compile_error)


@dataclass
class ConfigMemory:
    """A config's GPU memory against its footprint (engine/pipeline/judge/configs.py: one variant's arguments,
    weights and reference outputs): the judge's own peaks while it held the config, and the runner's word on its
    peak allocation (a figure for reports, never evidence in a verdict)."""
    footprint: int
    variants: int = 0
    judge_allocated: int = 0      # the judge's peak torch allocation (bytes)
    judge_reserved: int = 0       # what its caching allocator held at the peak (bytes)
    runner_allocated: int | None = None   # the runner's own report for this config (msg.JobDone.peak_bytes)
    runner_kept: int | None = None        # what it held meanwhile for other configs to be timed (kept_bytes)

    def note(self, judge_allocated: int, judge_reserved: int, runner: int | None, kept: int | None = None) -> None:
        self.judge_allocated = max(self.judge_allocated, judge_allocated)
        self.judge_reserved = max(self.judge_reserved, judge_reserved)
        if runner is not None:
            self.runner_allocated = max(self.runner_allocated or 0, runner)
        if kept is not None:
            self.runner_kept = max(self.runner_kept or 0, kept)


@dataclass
class JudgeResult:
    """What the judge writes to its result file after every step (so a killed judge still says where it was)."""
    finished: bool = False
    progress: Progress | None = None
    device: DeviceInfo | None = None
    numerics: Numerics | None = None   # the settings the judge computed under and its runner started with
    jail: JailReport | None = None
    correctness: dict[str, CorrectnessResult] = field(default_factory=dict)
    timing: dict[str, TimingRow] = field(default_factory=dict)
    integrity: dict[str, IntegrityResult] = field(default_factory=dict)
    error: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    traces: dict[str, str] = field(default_factory=dict)   # kbench's own failures, for a bug report
    warm: bool = False     # a spare judge: started (runner jailed, CUDA up) before this request came
    baseline_drift: dict[str, Recheck] = field(default_factory=dict)  # session baselines that moved
    # set when the judge itself could not go on (its own GPU memory ran out on a shared or small GPU): what it
    # did not finish is not a verdict on the kernel, and an evolution evaluates the candidate again
    unmeasured: str | None = None
    # set when a clock check failed while NVML saw other processes run work on this GPU
    # (engine.pipeline.judge.contention)
    gpu_shared: str | None = None
    memory: dict[str, ConfigMemory] = field(default_factory=dict)   # per config, as the judge measured it
    # per config: how its calls got fresh inputs (engine/pipeline/judge/fresh.py Fresh.summary)
    fresh: dict[str, dict[str, Any]] = field(default_factory=dict)
    # per config where there are any: the argument tensors (wire order) the reference mutates in place, which the
    # candidate must leave as the reference does (engine/pipeline/judge/configs.py `mutations`)
    mutated: dict[str, list[int]] = field(default_factory=dict)
    # per config: the reference's counted cost (FLOPs by FlopCounterMode, bytes of one variant's arguments, weights
    # and outputs), the physical floor's cost model where the task has none (engine/harness/cost_count.py)
    cost: dict[str, Cost] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return jsonable.dump(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any] | None, what: str = "the judge's result file") -> "JudgeResult":
        return jsonable.load(cls, obj or {}, what)

    def failed_already(self) -> bool:
        """A verdict against the candidate is on record (a config wrong, or an integrity check failed)."""
        return any(not c.ok for c in self.correctness.values()) or any(not i.ok for i in self.integrity.values())

    def clean(self) -> bool:
        """Finished without an error, every config correct and every integrity check passed: measurements
        such an evaluation took may serve later candidates."""
        return self.finished and not self.error and not self.failed_already()


STANDBY_STATE = "standby.json"   # written by a standby judge in its folder once warm (a StandbyState)


@dataclass(frozen=True)
class StandbyState:
    """What a spare judge writes to its folder once warm (judge.py --standby): whether it came up, and if not,
    why. The pool hands a request only to a spare that says ok (engine/pipeline/warm.py)."""
    ok: bool
    why: str | None = None

    @classmethod
    def read(cls, obj: dict[str, Any] | None) -> "StandbyState | None":
        """None while the spare has written nothing yet; a file that does not parse is a spare that is not up."""
        if obj is None:
            return None
        try:
            return jsonable.load(cls, obj, "a spare judge's standby state")
        except DataError as exc:
            return cls(False, str(exc))


@dataclass(frozen=True)
class JudgeOutcome:
    """A judge process's end as the parent sees it: its typed result beside how the process ended."""
    result: JudgeResult
    child: ChildOutcome    # the process's end (return code, timeout, output tail) and the raw file it left

    @classmethod
    def of(cls, child: ChildOutcome) -> "JudgeOutcome":
        """The typed form of what a judge left. A result file that does not parse is kbench's own failure: it
        becomes the result's error (with the reason), never an exception in the parent."""
        try:
            result = JudgeResult.from_json(child.result)
        except DataError as exc:
            result = JudgeResult(finished=bool(child.result.get("finished")),
                                 error=f"kbench could not read the judge's result ({exc}); a kbench failure, "
                                       "not a verdict on the kernel")
        if child.crashed and not child.timed_out and not result.error and not result.unmeasured \
                and not result.failed_already():
            # The trusted judge died without writing why (the kernel's out-of-memory killer, a host out of memory,
            # a fault in kbench): nothing was measured, so it is no verdict on the candidate. A candidate cannot
            # end the judge this way itself: its code runs in the runner, whose deaths the judge reports.
            result.unmeasured = f"the judge {child.describe_crash().removeprefix('the evaluator process ')} " \
                                f"before its verdict{host_memory_note()}: not a verdict on the kernel"
        return cls(result, child)

    @property
    def seconds(self) -> float:
        return self.child.seconds

    @property
    def crashed(self) -> bool:
        return self.child.crashed

    def describe_crash(self) -> str:
        return self.child.describe_crash()


def host_memory_note() -> str:
    """"; host memory 3.1 of 125.0 GiB available" from /proc/meminfo ("" where it cannot be read): a judge that
    died with the host short of memory was most likely ended by the kernel's out-of-memory killer."""
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        avail, total = (int(info[k].split()[0]) / (1 << 20) for k in ("MemAvailable", "MemTotal"))
    except (OSError, KeyError, ValueError):
        return ""
    return f"; host memory {avail:.1f} of {total:.1f} GiB available"
