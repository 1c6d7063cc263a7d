"""What crosses an evaluator's door: the Evaluator protocol the loop speaks, what one submission reports to,
and the outcome it hands back (`EvalOutcome`: the verdicts of the stages it ran, and the timings).

The loop needs only the narrow `Evaluator` protocol: `submit(candidate, on_stage) -> Future[EvalOutcome]`,
`cancel_pending()`, `close()`, `stats()`; and, where an evaluator can (`CanProfile`), `profile(candidate,
device=) -> Future[Verdict]`: the `profile` stage (ncu + torch profiler) alone for a candidate already evaluated,
on the evaluator's GPU, which a session asks for when a candidate becomes its new best (`[eval] profile =
"best"`). Implementations: engine.evolve.local_executor (this machine), engine.evolve.ray.executor (a Ray
cluster).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from engine import jsonable
from engine.candidates import Candidate
from engine.evolve.resume import INFRA_FAILURE
from engine.gpu_wait import NO_GPU, WAITING_EVENT, WAITING_FOR_GPU
from engine.verdict import Judgement, Stage, Status, Verdict, effective, judge_verdicts
from engine.workspace.note_entries import ConfigTiming, Event, Measurement, VerdictNote
from engine.workspace.records import now_iso

if TYPE_CHECKING:
    from engine.pipeline.eval_types import EvalReport

StageCallback = Callable[[Verdict], None]
PROFILE_STAGE = Stage.PROFILE


@dataclass
class EvalOutcome:
    """What an evaluator hands back: the verdicts of the stages it ran, and the timings."""

    verdicts: list[Verdict]
    configs: list[ConfigTiming] = field(default_factory=list)
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    device: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    build_s: float | None = None
    gpu_s: float | None = None
    gpu: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    # Set when the machinery failed, not the kernel (a Ray worker or node lost on every attempt, no GPU
    # visible to the evaluator): the candidate is not judged, and a resumed session evaluates it again.
    infra_error: str = ""
    attempts: int = 1

    @property
    def judgement(self) -> Judgement:
        """engine.verdict.judge over the verdicts of the stages this evaluation ran, and its speedup."""
        return judge_verdicts(self.verdicts, self.speedup_eager)

    @property
    def failed_stage(self) -> str | None:
        """The first stage that blocks the candidate (fail or suspicious), None where none does."""
        blocked = self.judgement.blocked_by
        return blocked[0] if blocked else None

    @property
    def no_gpu(self) -> bool:
        """The evaluator's machine had no GPU: nothing about the kernel is known, and nothing to note."""
        return self.infra_error == NO_GPU

    @property
    def not_judged(self) -> str:
        """Why this evaluation says nothing about the kernel, in one line; "" when it judged it."""
        if self.no_gpu:
            return f"not re-measured, still {WAITING_FOR_GPU}: {self.infra_error}"
        if self.infra_error:
            return f"not re-measured, infrastructure failure: {self.infra_error}"
        return ""

    @property
    def reason(self) -> str:
        stage = self.failed_stage
        v = effective(self.verdicts, stage) if stage else None
        return v.reason if v else ""

    @property
    def timed(self) -> bool:
        return self.speedup_eager is not None and bool(self.configs)

    def measurement(self) -> Measurement | None:
        """The workspace measurement note, when the candidate was timed."""
        if not self.timed:
            return None
        d = self.device or {}
        return Measurement(speedup_eager=self.speedup_eager, speedup_compile=self.speedup_compile,
                           configs=tuple(self.configs), gpu=str(d.get("gpu") or ""), driver=str(d.get("driver") or ""),
                           torch=str(d.get("torch") or ""), cuda=str(d.get("cuda") or ""),
                           data={"seconds": round(self.seconds, 3), "build_s": self.build_s, "gpu_s": self.gpu_s,
                                 "gpu_index": self.gpu, **self.data})

    def infra_event(self, **data: Any) -> Event:
        """The note that records an infrastructure failure, or a candidate waiting for a GPU (engine.gpu_wait),
        instead of any verdict."""
        return Event(WAITING_EVENT if self.no_gpu else INFRA_FAILURE,
                     {"reason": self.infra_error, "attempts": self.attempts, **data}, now_iso())

    def reevaluation_notes(self, **event_data: Any) -> list[VerdictNote | Measurement | Event]:
        """What a re-evaluation appends (`kbench reevaluate` and the app alike): its verdicts (by
        `reevaluate`), the measurement if it was timed, and a `reevaluated` event with `event_data` added.
        Where it judged nothing: only the infrastructure event, or nothing at all on a machine without a GPU."""
        if self.no_gpu:
            return []
        if self.infra_error:
            return [self.infra_event(**event_data)]
        entries: list[VerdictNote | Measurement | Event] = [VerdictNote(v, now_iso(), "reevaluate") for v in self.verdicts]
        meas = self.measurement()
        if meas is not None:
            entries.append(meas)
        entries.append(Event("reevaluated", {"speedup": self.speedup_eager, "failed_stage": self.failed_stage,
                                             "gpu": (self.device or {}).get("gpu"), **event_data}, now_iso()))
        return entries

    def to_json(self) -> dict[str, Any]:
        """Plain JSON, for crossing a process or machine boundary (the Ray executor)."""
        return jsonable.dump(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any], what: str = "an evaluation's outcome") -> EvalOutcome:
        return jsonable.load(cls, obj, what)

    @classmethod
    def from_report(cls, report: EvalReport) -> EvalOutcome:
        if report.unmeasured:   # the machine could not measure: the skipped stages judge nothing, say why
            return cls(verdicts=[v for v in report.verdicts if v.stage not in (Stage.CORRECTNESS, Stage.TIMING)],
                       device=dict(report.device or {}), seconds=report.seconds, data={"build": report.build, "phases": report.phases},
                       infra_error=report.unmeasured)
        configs = [ConfigTiming(r.name, r.candidate_ms, r.candidate_iqr_ms, r.eager_ms, r.compile_ms)
                   for r in report.rows if r.candidate_ms is not None]
        return cls(verdicts=list(report.verdicts), configs=configs, speedup_eager=report.geomean_speedup_eager,
                   speedup_compile=report.geomean_speedup_compile, device=dict(report.device or {}),
                   seconds=report.seconds, data={"build": report.build, "phases": report.phases})


class Evaluator(Protocol):
    """Where committed candidates go to be compiled, checked and timed."""

    def submit(self, candidate: Candidate, on_stage: StageCallback | None = None) -> Future[EvalOutcome]:
        """Start evaluating; `on_stage(verdict)` may be called (from any thread) as stages finish. The future's
        result carries every verdict, including those already passed to on_stage."""

    def cancel_pending(self) -> int:
        """Cancel every submission not yet started; returns how many (their futures end cancelled)."""

    def close(self, wait: bool = True) -> None: ...

    def stats(self) -> dict[str, Any]: ...


@runtime_checkable
class CanProfile(Protocol):
    """An evaluator that can run the profile stage alone (the loop checks with isinstance: it is optional)."""

    def profile(self, candidate: Candidate, *, device: dict[str, Any] | None = None) -> Future[Verdict]:
        """The profile stage of an evaluated candidate, on a GPU; `device`: its outcome's device (the GPU model
        names the cached roofline peaks). The verdict is `skipped` with the reason where it cannot run."""


@runtime_checkable
class HasCapacity(Protocol):
    """An evaluator that says how many submissions it can usefully hold (the loop fills no further)."""

    @property
    def capacity(self) -> int: ...


@runtime_checkable
class SaysWaits(Protocol):
    """An evaluator that can say, before a candidate's build starts, what long wait it holds (torch's precompiled
    header built once, a load_inline build): the loop emits it as a LongWait event, so no minute passes in silence."""

    def expected_wait(self, candidate: Candidate) -> str | None: ...


def needs_profile(out: EvalOutcome) -> bool:
    """The candidate was judged, passed and timed, and its evaluation did not profile it (the profile stage runs
    only for such candidates, as evaluate() runs it with `EvalOptions.profile`)."""
    timing = effective(out.verdicts, Stage.TIMING)
    return (not out.infra_error and out.judgement.eligible and out.timed
            and timing is not None and timing.status == Status.PASS
            and effective(out.verdicts, Stage.PROFILE) is None)


def profile_now(evaluator: Evaluator, candidate: Candidate, out: EvalOutcome,
                timeout_s: float | None = None) -> Verdict | None:
    """Profile an evaluated candidate on the evaluator's GPU and wait for the verdict (on demand: a person's
    re-evaluation). None where the evaluator cannot profile or the outcome does not call for it."""
    if not isinstance(evaluator, CanProfile) or not needs_profile(out):
        return None
    try:
        return evaluator.profile(candidate, device=out.device).result(timeout_s)
    except Exception as exc:  # noqa: BLE001 - profiling is feedback: its failure is a skipped verdict
        return Verdict(PROFILE_STAGE, Status.SKIPPED, f"profiling failed: {type(exc).__name__}: {str(exc)[:300]}")


@dataclass
class Submission:
    """One candidate handed to an executor: what it reports to, and since when."""

    candidate: Candidate
    on_stage: StageCallback | None
    future: Future
    submitted: float

    def notify(self, v: Verdict) -> None:
        if self.on_stage is not None:
            try:
                self.on_stage(v)
            except Exception:  # noqa: BLE001 - a subscriber's bug must not lose the result
                pass

