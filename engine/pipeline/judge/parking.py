"""A config's variants parked in host memory: the judge's GPU holds one variant's inputs and one reference at a
time, not every variant's (KernelBench's level 1 L1/L2 norms take 8 GiB in and 8 GiB out per variant).

Once a variant is prepared (its inputs drawn, its call plan captured, its reference computed), its inputs, call
arguments, reference outputs and the arguments the reference changes in place (as it leaves them) move to host
memory (page-locked where the driver allows, so a copy back runs at full speed); the models stay on the GPU (a
KernelBench model is shared by the variants, and a model's weights are what every reference call needs). The
runner gets its copies from the parked tensors (they go through host memory anyway: engine/pipeline/protocol/arena.py).
Where the judge needs a variant again (to compose a candidate's outputs under it, to compare with its reference) it
brings that one back for the moment (`loaded`, `ParkedRefs`).

Lazy imports: torch, inside the functions, as in configs.py (the judge spawns its runner before torch loads).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any, Iterator

GPU = "cuda"   # where a parked variant is brought back to (a test's stand-in device elsewhere)

if TYPE_CHECKING:
    from engine.harness.runtimes.base import TaskRuntime
    from engine.pipeline.judge.configs import Prepared, Variant


def moved(value: Any, device: str, memo: dict[int, Any]) -> Any:
    """`value` with its tensors (alone, or in lists, tuples and dicts) copied to `device`, each tensor once
    (`memo`: a tensor shared by the state and the call plan stays shared); modules and anything else as they are.
    Copies to the host are page-locked where possible."""
    import torch
    if isinstance(value, torch.Tensor):
        if value.device.type == torch.device(device).type:
            return value
        if id(value) not in memo:
            copy = _to_host(value) if device == "cpu" else value.detach().to(device, copy=True)
            memo[id(value)] = copy.requires_grad_(True) if value.requires_grad else copy
        return memo[id(value)]
    if isinstance(value, (list, tuple)):
        return type(value)(moved(v, device, memo) for v in value)
    if isinstance(value, dict):
        return {k: moved(v, device, memo) for k, v in value.items()}
    return value


def _to_host(value: Any) -> Any:
    """A GPU tensor's copy in page-locked host memory, in one copy: the block comes from torch's pinned-memory cache
    (a variant parked or a reference kept for the next call reuses the last one's), and the GPU writes it at full
    speed. Copying to pageable memory and pinning that afterwards cost two slow copies and a fresh allocation: about
    1 s per GiB, most of a large problem's check. Where the driver refuses to pin, pageable memory (slower copies)."""
    import torch
    if value.device.type == "cuda":
        try:
            host = torch.empty_like(value, device="cpu", pin_memory=True)
        except RuntimeError:
            host = None
        if host is not None:
            return host.copy_(value.detach())
    return value.detach().to("cpu", copy=True)


def park(runtime: TaskRuntime, variant: Variant) -> Variant:
    """The variant moved to host memory (models aside); the runtime is left holding the parked state, so the GPU
    copies are freed."""
    memo: dict[int, Any] = {}
    state = {k: moved(v, "cpu", memo) for k, v in variant.state.items()}
    plan = dataclasses.replace(variant.plan, args=moved(variant.plan.args, "cpu", memo))
    parked = dataclasses.replace(variant, state=state, plan=plan, ref=moved(variant.ref, "cpu", memo),
                                 after=moved(variant.after, "cpu", memo), parked=True)
    runtime.restore_state(state)
    return parked


@contextlib.contextmanager
def loaded(runtime: TaskRuntime, prep: Prepared, v: int, outputs: bool = True) -> Iterator[Variant]:
    """Variant `v` on the GPU for the moment, the runtime set to it; afterwards the runtime holds the parked state
    again and the GPU copies are freed. An unparked variant (a CPU run) is used as it is. `outputs` False: its
    reference outputs and the values the reference leaves in its arguments stay in host memory (a caller that
    reads only the inputs: a problem's outputs can be as large as its inputs, and the judge holds a candidate's
    output beside them meanwhile)."""
    var = prep.variants[v]
    if not var.parked:
        runtime.restore_state(var.state)
        yield var
        return
    memo: dict[int, Any] = {}
    here = dataclasses.replace(var, state={k: moved(x, GPU, memo) for k, x in var.state.items()},
                               plan=dataclasses.replace(var.plan, args=moved(var.plan.args, GPU, memo)),
                               ref=moved(var.ref, GPU, memo) if outputs else var.ref,
                               after=moved(var.after, GPU, memo) if outputs else var.after, parked=False)
    runtime.restore_state(here.state)
    try:
        yield here
    finally:
        runtime.restore_state(var.state)


class ParkedRefs:
    """Each variant's reference outputs, on the GPU when asked for (`refs[v]`, a copy for the moment)."""

    def __init__(self, prep: Prepared):
        self.prep = prep

    def __len__(self) -> int:
        return len(self.prep.variants)

    def __getitem__(self, v: int) -> tuple:
        var = self.prep.variants[v]
        return moved(var.ref, GPU, {}) if var.parked else var.ref
