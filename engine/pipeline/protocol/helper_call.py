"""The one call of kbench's timing helper's `run` (engine/pipeline/timer/binding.cpp): the runner's, for the
candidate's jobs (engine/pipeline/runner/main.py), and the judge's own instance's, for the null loop and the baselines
(engine/pipeline/judge/timer.py LocalTimer), both through `run_helper`.

Every argument goes by its name, and the timing loop's parameters by their field names in TimingParams (the
config's [timing] section), which are the names binding.cpp gives them: a parameter added, dropped, renamed or
reordered on one side cannot shift the others into the wrong slots, and tests/pipeline/test_timing_params.py reads
binding.cpp to check that the names `helper_arguments` gives are exactly the ones `run` takes.

Standard library only (with engine.pipeline.protocol.messages and engine.timing_params): the runner imports it,
once jailed."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Sequence

from engine.pipeline.protocol import messages as msg
from engine.timing_params import TimingParams

# A check job's loop parameters: each call flushed as a timed one is; the counts and the budget are the timing
# mode's, unused by a check (its calls are the schedule's)
CHECK_LOOP = TimingParams(warmup=0, min_iters=1, max_iters=1, budget_s=0.0, flush_l2=True, checks=0)


def helper_arguments(job: msg.Job, call: Callable[[], Any], live: list[Any], variants: list[list[Any]],
                     fresh_modes: Sequence[int] = (), fresh_alphas: Sequence[float] = (),
                     mutable_inputs: Sequence[int] = ()) -> dict[str, Any]:
    """`run`'s keyword arguments for `job` on a config's callable and tensors."""
    loop = job.timing if job.timing is not None else CHECK_LOOP
    return {"job_id": job.job, "mode": job.mode, "call": call, "live": live, "variants": variants,
            "schedule": list(job.schedule), **{f.name: getattr(loop, f.name) for f in fields(loop)},
            "probe_inputs": job.probe_inputs, "settle_ms": job.settle_ms, "fresh_modes": list(fresh_modes),
            "fresh_alphas": list(fresh_alphas), "mutable_inputs": list(mutable_inputs)}


def run_helper(helper: Any, job: msg.Job, call: Callable[[], Any], live: list[Any], variants: list[list[Any]],
               fresh_modes: Sequence[int] = (), fresh_alphas: Sequence[float] = (),
               mutable_inputs: Sequence[int] = ()) -> Any:
    """Run `job` on the loaded helper module; what `run` returns ("ok" or "error": the records are what count)."""
    return helper.run(**helper_arguments(job, call, live, variants, fresh_modes, fresh_alphas, mutable_inputs))
