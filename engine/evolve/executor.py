"""Evaluators: where committed candidates go to be compiled, checked and timed (an index; the code is in):

    outcome.py         the Evaluator protocol, EvalOutcome (what an evaluation hands back), Submission
    worker_fns.py      what the workers run: build, check + time, profile; visible_gpus
    local_executor.py  LocalPipelineExecutor: CPU compile pool + one worker per GPU, pipelined
    ray_executor.py    RayExecutor: the same on a Ray cluster (the driver's queue and poll thread)
    ray_tasks.py       what runs on the Ray nodes; ray_cluster.py connect and probe; ray_jobs.py retry policy
    fake.py            FakeEvaluator: no compiler, no GPU (`--fake-evaluator`, tests)

`engine.evolve.factory.make_evaluator` picks the local or the Ray executor from the config. The names below
stay importable from here for callers written before the split.
"""

from engine.evolve.local_executor import LocalPipelineExecutor
from engine.evolve.outcome import (
    BLOCKING,
    PROFILE_STAGE,
    CanProfile,
    EvalOutcome,
    Evaluator,
    StageCallback,
    Submission,
    needs_profile,
    profile_now,
)
from engine.evolve.worker_fns import (
    cached_peaks,
    compile_verdict,
    default_build,
    default_gpu,
    default_profile,
    start_resource_tracker,
    visible_gpus,
)

__all__ = [
    "BLOCKING",
    "PROFILE_STAGE",
    "CanProfile",
    "EvalOutcome",
    "Evaluator",
    "LocalPipelineExecutor",
    "StageCallback",
    "Submission",
    "cached_peaks",
    "compile_verdict",
    "default_build",
    "default_gpu",
    "default_profile",
    "needs_profile",
    "profile_now",
    "start_resource_tracker",
    "visible_gpus",
]
