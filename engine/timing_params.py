"""The timing loop's parameters (TimingParams): the config's `[timing]` section (engine.config.sections), the
judge's request's `timing_params` and the runner's `job` message's `timing` (engine.pipeline.protocol.messages), and
the keyword arguments of the compiled helper's `run` (engine/pipeline/protocol/helper_call.py).

Standard library only and importing no other kbench module: the jailed runner imports it, through its messages,
before its jail is up (tests/project/test_architecture.py holds it to that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class TimingParams:
    """The `[timing]` section: the parameters of the compiled timing loop (engine/pipeline/timer/binding.cpp's `run`),
    one dataclass from the config file to the helper. It travels in the judge's request (JudgeRequest.timing_params)
    and the runner's `job` message (engine.pipeline.protocol.messages.Job); engine/pipeline/protocol/helper_call.py
    passes its fields
    to the helper by name, so each field's name is the helper's argument's name."""

    # Strict in the config file as every section (engine.config.checks checks sections in strict mode), but not
    # in the dataclass's own config: strict there would refuse the JSON object the judge's request carries it as.
    # A plain dict, as engine.config.sections' rules: pydantic is never imported here.
    __pydantic_config__ = {"extra": "forbid"}

    warmup: int = 5             # untimed calls first; their median sets the number of timed ones
    min_iters: int = 20         # timed calls: the budget's count, clamped to [min_iters, max_iters]
    max_iters: int = 2000
    budget_s: float = 0.4       # measured time per callable, after warm-up
    flush_l2: bool = True       # flush the L2 (and reset persisting lines) before every call
    checks: int = 3             # timed iterations whose outputs go to the judge, drawn at random

    def problems(self) -> list[str]:
        """What is wrong with these values, one line each naming the key (empty: nothing)."""
        out = [f"{k} must be at least {low}, got {getattr(self, k)}" for k, low in
               (("warmup", 0), ("min_iters", 1), ("max_iters", 1), ("checks", 0)) if getattr(self, k) < low]
        if not (math.isfinite(self.budget_s) and self.budget_s >= 0):
            out.append(f"budget_s must be a finite number of seconds, at least 0, got {self.budget_s}")
        if self.max_iters < self.min_iters:
            out.append(f"max_iters ({self.max_iters}) must be at least min_iters ({self.min_iters})")
        return out
