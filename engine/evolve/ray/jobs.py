"""One evaluation's way through Ray tasks (build, then gpu; or profile alone), its failed attempts, and the
retry policy: what a lost task becomes.

Every task runs with Ray's own retries off; the executor retries instead, so it can tell the two kinds of
failure apart. A kernel that hangs, faults or corrupts memory is caught by the sandbox inside the task and
comes back as a `fail` verdict like anywhere else. A Ray error (the worker process or its node died, an
object was lost, the task raised because the node is misconfigured) is the machinery's fault: the evaluation
is run again, up to `retries` more times, wherever Ray schedules it (a dead node has left the cluster by then),
and after that the outcome carries `infra_error`, which the loop records as an `infrastructure_failure`
event, not a verdict, and which a resumed session evaluates again. A malformed envelope (an EnvelopeError of
engine/evolve/ray/envelopes.py, raised by the task reading its request or by the driver reading the reply: a
node and a driver of different kbench versions) ends the job at once the same way: another attempt would fail
alike.
"""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from engine.evolve.outcome import PROFILE_STAGE, EvalOutcome, Submission
from engine.evolve.ray.envelopes import Built, EnvelopeError, GpuReply
from engine.evolve.ray.tasks import ray
from engine.evolve.worker_fns import compile_verdict
from engine.verdict import Stage, Status, Verdict


@dataclass
class RayJob(Submission):
    phase: str = "build"                 # build -> gpu; or profile (alone: its future's result is a Verdict)
    built: Built | None = None           # the compile task's build, shipped to the gpu task
    ref: Any = None                      # the ray.ObjectRef in flight
    attempts: list[dict[str, Any]] = field(default_factory=list)   # failed attempts: where and why
    build_s: float | None = None
    cancelled: bool = False
    settled: bool = False                # counted out of RayExecutor._outstanding
    device: dict[str, Any] | None = None     # profile: the evaluation's device (its GPU model's peaks)
    malformed: bool = False              # the last attempt failed on a malformed envelope: not retried

    def gpu_outcome(self, reply: GpuReply) -> EvalOutcome:
        """The gpu task's reply as the evaluation's outcome, its stages reported as they land. A build from
        the cluster's compile task stands as the compile verdict unless the GPU node compiled again."""
        where = reply.ran.where.to_json()
        out = reply.outcome
        verdicts = out.verdicts
        if self.built is not None:
            cv = compile_verdict(self.built.build)
            rest = [x for x in verdicts if not (x.stage == Stage.COMPILE and x.status == Status.PASS)]
            verdicts = rest if any(x.stage == Stage.COMPILE for x in rest) else [cv] + rest
        for x in verdicts:
            if x.stage != Stage.COMPILE or self.built is None:   # the shipped build's verdict was reported already
                self.notify(x)
        out.verdicts = verdicts
        out.build_s = self.build_s
        out.gpu_s = reply.ran.seconds
        out.attempts = len(self.attempts) + 1
        out.data["ray"] = {"gpu": where, "failed_attempts": self.attempts} if self.attempts else {"gpu": where}
        return out

    def failed(self, exc: BaseException) -> str:
        """Note a lost attempt; its reason in one line."""
        reason = describe(exc)
        # Ray re-raises a task's exception as a RayTaskError that holds it as `cause`
        self.malformed = isinstance(exc, EnvelopeError) or isinstance(getattr(exc, "cause", None), EnvelopeError)
        self.attempts.append({"phase": self.phase, "error": reason, "at": time.time()})
        return reason

    def retry(self, reason: str, retries: int, compile_on_cluster: bool) -> bool:
        """Whether attempts are left; if so the job is set to go again (a gpu task without a shipped build
        starts over at the build when the cluster compiles)."""
        if self.malformed or len(self.attempts) > retries:
            return False
        _log_retry(self, reason)
        if self.phase == "gpu" and self.built is None and compile_on_cluster:
            self.phase = "build"
        return True

    def lost(self, reason: str) -> EvalOutcome | Verdict:
        """What the job ends as with no attempts left."""
        how = ("refused a malformed envelope (not retried)" if self.malformed
               else f"was lost on all {len(self.attempts)} attempt(s); last")
        if self.phase == "profile":     # feedback, not a judgement: a skipped verdict says what happened
            return Verdict(PROFILE_STAGE, Status.SKIPPED, f"the profile task {how}: {reason}")
        # an infrastructure failure, not a verdict: a resumed session evaluates the candidate again
        why = f"{self.phase} task {how}: {reason}"
        return EvalOutcome([], build_s=self.build_s, infra_error=why, attempts=len(self.attempts),
                           data={"ray": {"failed_attempts": self.attempts}})

    def abandoned(self, reason: str) -> EvalOutcome | Verdict:
        """What the job ends as when Ray itself is gone (the attempt in flight counted)."""
        if self.phase == "profile":
            return Verdict(PROFILE_STAGE, Status.SKIPPED, reason)
        return EvalOutcome([], build_s=self.build_s, infra_error=reason, attempts=len(self.attempts) + 1)


def _log_retry(job: RayJob, reason: str) -> None:
    """Retries are not verdicts; they show up in the outcome's data and in the log of the CLI/TUI."""
    logging.getLogger("kbench.ray").warning("%s: %s task lost (%s); retrying (attempt %d)",
                                            job.candidate.name, job.phase, reason, len(job.attempts) + 1)


def describe(exc: BaseException) -> str:
    """One line for a Ray failure: the kind, and the first line of its message."""
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = getattr(exc, "cause", None)
        kind = type(cause).__name__ if cause is not None else "RayTaskError"
        first = str(cause or exc).strip().splitlines()
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return f"{kind} in the task: {first[-1] if first else tb}"[:400]
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0] if first else ''}"[:400]
