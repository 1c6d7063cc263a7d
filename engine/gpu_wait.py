"""One state, one name: a candidate that compiled on a machine without a GPU is *waiting for a GPU*.

It is not a failure (nothing about the kernel is known), not an infrastructure failure (nothing broke) and
not merely pending (it was compiled and is queued): the CLI, the app, the loop's events and the notes all
call it by the name below. Its note event is `waiting_for_gpu`; older workspaces recorded the same state as
an `infrastructure_failure` whose reason is the no-GPU message, which reads the same.

The judge's no-GPU message, NO_GPU, is defined here rather than beside the judge: this layer is below the pipeline
(engine/profile reads the state too), so recognising an old record must not import the pipeline.
"""

from __future__ import annotations

from typing import Any

NO_GPU = "no CUDA GPU is visible to the evaluator"   # the judge's JudgeResult.error where torch finds no GPU
WAITING_FOR_GPU = "waiting for a GPU"
WAITING_EVENT = "waiting_for_gpu"
HOW_TO_GO_ON = "run the same command on a machine with a GPU to measure them and go on"

# events after which a candidate's last evaluation is known: the latest one says where it stands
_EVALUATION_EVENTS = ("evaluated", "reevaluated", "infrastructure_failure", WAITING_EVENT)


def is_waiting_event(event: Any) -> bool:
    if event.event == WAITING_EVENT:
        return True
    return event.event == "infrastructure_failure" and str((event.data or {}).get("reason", "")) == NO_GPU


def waiting_for_gpu(status: Any) -> bool:
    """A candidate (engine.workspace.views.CandidateStatus) whose last evaluation found no GPU: unmeasured, not
    blocked by any verdict, waiting for a machine that can check and time it."""
    if status.measurement is not None or status.blocked:
        return False
    last = next((e for e in reversed(status.events) if e.event in _EVALUATION_EVENTS), None)
    return last is not None and is_waiting_event(last)
