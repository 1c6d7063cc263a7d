"""Pre-GPU checks the loop runs on every committed candidate before it may reach the evaluator.

A check is `check(task, direction, candidate) -> Verdict`. The default is the static reward-hack scan
(engine.integrity.static): a `fail` finishes the candidate as rejected, never compiled, never on a GPU,
until a person overrides the `static` verdict. The loop owns this stage, so the executor tells evaluate()
not to repeat it (EvalOptions.static_gate; engine.evolve.worker_fns.default_gpu).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from engine.integrity.static import check_candidate
from engine.verdict import Verdict

if TYPE_CHECKING:
    from engine.candidates import Candidate
    from engine.evolve.gate import Check
    from engine.tasks.model import Task


def static_integrity_check(task: Task, direction: str, candidate: Candidate, policy: str | None = None) -> Verdict:
    """The static scan under the session's library policy (None: the task's, else the default)."""
    return check_candidate(candidate, task, policy)


def session_checks(policy: str | None) -> tuple[Check, ...]:
    """The default checks for a session whose library policy is `policy` (`[eval] library_policy` or a flag)."""
    return (partial(static_integrity_check, policy=policy),) if policy else DEFAULT_CHECKS


DEFAULT_CHECKS = (static_integrity_check,)
