"""Typed verdicts: what every pipeline stage returns and what the workspace stores as notes; and `judge`, the
one rule that says what a candidate's stage statuses amount to (passed? eligible to be a session's best?).

Every caller that asks "did it pass" or "may it be the best" asks `judge` (through `EvalReport.judgement`,
`CandidateStatus.judgement` or `judge_verdicts`): `kbench eval`'s outcome and exit code, the record `kbench
export --from-dir` relies on, export's refusal, the evolution loop's population and the session's best, the
app. Nothing else decides it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any

from engine import jsonable


class Stage(StrEnum):
    """The pipeline's stages, in pipeline order. A str enum: `Stage.CORRECTNESS == "correctness"`, and a member
    is written to notes and JSON as its plain value, so notes on disk keep their exact strings. `integrity`
    follows `timing`: the judge checks it while it runs the candidate for correctness and timing, and reports
    it after them."""

    STATIC = "static"              # reward-hack scan of the sources (engine.integrity.static)
    LLM_VERIFY = "llm_verify"      # the LLM verifiers' aggregate, and their votes (engine.llm.verifiers)
    COMPILE = "compile"
    CORRECTNESS = "correctness"
    TIMING = "timing"
    INTEGRITY = "integrity"        # the judge's dynamic reward-hack checks (engine.pipeline.verdicts)
    PROFILE = "profile"            # ncu + torch profiler: feedback for the proposers


STAGES: tuple[Stage, ...] = tuple(Stage)
PRE_GPU: tuple[Stage, ...] = (Stage.STATIC, Stage.LLM_VERIFY)      # judged before any build or GPU time


class Status(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIPPED = "skipped"
    SUSPICIOUS = "suspicious"


# The statuses that block a candidate, whichever stage says them (see `judge`). Defined here only.
BLOCKING: tuple[Status, ...] = (Status.FAIL, Status.SUSPICIOUS)
# The stages a candidate must have passed, each from a check that really ran (see `judge`).
REQUIRED: tuple[Stage, ...] = (Stage.COMPILE, Stage.CORRECTNESS)


@dataclass(frozen=True)
class Verdict:
    stage: str          # a Stage (any other name is kept and shown, and judged like the others)
    status: Status
    reason: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in (Status.PASS, Status.SKIPPED)

    def to_json(self) -> dict[str, Any]:
        return jsonable.dump(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any], what: str = "") -> "Verdict":
        return jsonable.load(cls, obj, what)


def in_pipeline_order(stages: Iterable[str]) -> list[str]:
    """Stage names in pipeline order (STAGES), then any others alphabetically."""
    have = set(stages)
    return [s for s in STAGES if s in have] + sorted(have.difference(STAGES))


# --------------------------------------------------------------------------------------------- judging


@dataclass(frozen=True)
class StageOutcome:
    """What `judge` reads of one stage."""

    status: Status              # effective: the stage's last verdict, or a person's override after it
    ran: bool = True            # its check ran: its latest verdict exists and is not `skipped`
    overridden: bool = False    # `status` is a person's override


@dataclass(frozen=True)
class Judgement:
    """What a candidate's stage statuses amount to (`judge`)."""

    passed: bool
    eligible: bool
    blocked_by: tuple[str, ...] = ()    # stages whose effective status is fail or suspicious, pipeline order
    unmet: tuple[str, ...] = ()         # required stages without a pass from a check that ran
    unran: tuple[str, ...] = ()         # of those, the ones whose check never ran (only an override, or skipped)
    measured: bool = False              # a positive measured speedup
    why_not_passed: str = ""            # "" when passed
    why_not: str = ""                   # why it is not eligible; "" when it is

    @property
    def blocked(self) -> bool:
        return bool(self.blocked_by)

    @property
    def not_checked(self) -> bool:
        """Compiled, nothing blocks, but correctness was never checked (no GPU): nothing is known yet."""
        return not self.blocked and Stage.CORRECTNESS in self.unran and Stage.COMPILE not in self.unmet

    @property
    def failed_stage(self) -> str | None:
        """The stage to blame for not being eligible: the first blocking stage, else the first required stage
        not passed, else `timing` (passed, never measured); None when eligible."""
        if self.eligible:
            return None
        if self.blocked_by:
            return self.blocked_by[0]
        return self.unmet[0] if self.unmet else Stage.TIMING


def judge(stages: Mapping[str, StageOutcome | Status], speedup: float | None = None) -> Judgement:
    """What passing and eligibility mean, from each stage's effective status. The only place that decides it.

    `stages` maps a stage name to its outcome after overrides (a bare Status: a verdict with that status, not
    overridden); a stage that is absent has no verdict and no override. `speedup`: the measured geomean
    speedup over eager, None when the candidate was never timed.

    The rule:
    - Any stage whose effective status is FAIL or SUSPICIOUS (BLOCKING) blocks the candidate: whichever stage
      says it, the static scan and the LLM verifiers as much as correctness, timing, integrity or profile, and
      stages this module does not know too. SUSPICIOUS means "a person must confirm": until a person
      overrides it, it blocks like a FAIL.
    - SKIPPED never blocks, and a missing stage never blocks: a check that did not run (off, unavailable, not
      reached) says nothing against the candidate.
    - Required (REQUIRED): `compile` and `correctness` must each be PASS, from a check that ran. A stage that
      is missing, or SKIPPED (no GPU: correctness never checked), does not satisfy it.
    - Overrides: a person's override replaces the stage's effective status (an override to PASS clears a FAIL
      or SUSPICIOUS; an override to FAIL blocks). An override may change a verdict, never invent a
      measurement: an override to PASS over a required check that never ran (no verdict, or `skipped`) does
      not satisfy the requirement (CandidateStatus.never_measured says why), and no override makes a speedup.
    - passed: nothing blocks and every required stage is met. It is what `kbench eval` reports, what export
      needs, and what the `profile` stage waits for.
    - eligible (may be a session's best, a parent, counted in fitness): passed, and a positive measured
      speedup. A timing FAIL or SUSPICIOUS blocks like any other; the measurement itself is the timing proof.
    """
    order = in_pipeline_order(stages)
    got = {s: (o if isinstance(o, StageOutcome) else StageOutcome(o, ran=o is not Status.SKIPPED))
           for s, o in stages.items()}
    blocked_by = tuple(s for s in order if got[s].status in BLOCKING)
    unmet = [s for s in REQUIRED if not (s in got and got[s].ran and got[s].status is Status.PASS)]
    unran = [s for s in unmet if s in got and not got[s].ran]
    if blocked_by:
        why_not_passed = "its verdicts include " + ", ".join(f"{s} {got[s].status.value}" for s in blocked_by)
    elif unmet:
        why_not_passed = _unmet(unmet[-1], got.get(unmet[-1]))  # the latest one says most: no correctness says all
    else:
        why_not_passed = ""
    passed = not why_not_passed
    measured = speedup is not None and speedup > 0
    eligible = passed and measured
    why_not = why_not_passed or ("" if measured else "it has no measured speedup")
    return Judgement(passed=passed, eligible=eligible, blocked_by=blocked_by, unmet=tuple(unmet),
                     unran=tuple(unran), measured=measured, why_not_passed=why_not_passed, why_not=why_not)


def _unmet(stage: str, o: StageOutcome | None) -> str:
    if o is None:
        return f"it has no {stage} verdict"
    if not o.ran and o.status is Status.PASS:
        return (f"its {stage} check never ran; the `pass` is an override, and an override may change a verdict, "
                "never invent a measurement")
    if not o.ran:
        return f"its {stage} check never ran ({o.status.value})"
    return f"its {stage} verdict is {o.status.value}"


OVERRIDDEN = "overridden"   # Verdict.data key: evaluate() went past this verdict on a person's say-so


def outcome_of(verdict: Verdict | None, override: Status | None = None) -> StageOutcome:
    """One stage's outcome: its latest verdict (None: it has none), and a person's override after it (None:
    none). The check ran when that verdict exists and is not `skipped`. A verdict marked `overridden` in its
    data (evaluate()'s static gate, told by a person to go past its `fail`: EvalOptions.override_static, `kbench
    eval --override-static`) counts as overridden to pass, as an `override` note to `pass` does."""
    ran = verdict is not None and verdict.status is not Status.SKIPPED
    if override is not None:
        return StageOutcome(override, ran, overridden=True)
    if verdict is None:
        raise ValueError("a stage with neither a verdict nor an override has no outcome")
    if verdict.data.get(OVERRIDDEN):
        return StageOutcome(Status.PASS, ran, overridden=True)
    return StageOutcome(verdict.status, ran)


def outcomes_of(verdicts: Iterable[Verdict]) -> dict[str, StageOutcome]:
    """Each stage's outcome from a list of verdicts, oldest first (an EvalReport's, an EvalOutcome's, a
    review's): a stage's last verdict is its effective one, as in a workspace note (outcome_of)."""
    last: dict[str, Verdict] = {}
    for v in verdicts:
        last[v.stage] = v
    return {s: outcome_of(v) for s, v in last.items()}


def judge_verdicts(verdicts: Iterable[Verdict], speedup: float | None = None) -> Judgement:
    """`judge` over a list of verdicts (outcomes_of)."""
    return judge(outcomes_of(verdicts), speedup)


def effective(verdicts: Iterable[Verdict], stage: str) -> Verdict | None:
    """The last verdict of `stage` in the list (the one `judge` reads), or None."""
    found = None
    for v in verdicts:
        if v.stage == stage:
            found = v
    return found
