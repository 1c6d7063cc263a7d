"""A cost model for tasks that bring none (KernelBench problems, robust-kbench folders, user tasks): the reference's
FLOPs counted by torch's FlopCounterMode, its bytes from its inputs, weights and outputs. The physical floor
(engine/harness/roofline.py) then works for every task as it does for the built-in ones, whose task.toml gives a
cost per config.

What it counts: FlopCounterMode knows matmuls, convolutions and attention (elementwise work counts no FLOPs), so
the FLOPs are a lower bound, as a floor's must be; the bytes are what one call must at least read and write once
(every input, parameter and buffer, and every output), also a lower bound. Run on the meta device nothing is
allocated or computed (`kbench show` of a 12 GiB KernelBench problem on a laptop); the judge counts on the real
reference as it prepares a config.

Lazy imports: torch, inside the functions (`kbench show` loads this module; its other commands need no torch).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Iterator

from engine.harness.runtimes.base import as_outputs
from engine.tasks.model import Cost

if TYPE_CHECKING:
    from engine.harness.runtimes.base import TaskRuntime
    from engine.tasks.model import TaskConfig


def tensor_bytes(values: Any) -> int:
    """Bytes of the tensors among `values` (nested lists and tuples too)."""
    import torch
    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, (list, tuple)):
        return sum(tensor_bytes(v) for v in values)
    return 0


@contextlib.contextmanager
def flops_counted() -> Iterator[Callable[[], int]]:
    """Count the FLOPs of what runs inside; the callable gives the total once the block has ended."""
    from torch.utils.flop_counter import FlopCounterMode
    mode = FlopCounterMode(display=False)
    with mode:
        yield mode.get_total_flops
    del mode


@dataclasses.dataclass(frozen=True)
class Counted:
    cost: Cost
    note: str = ""      # what could not be counted


def call_flops(runtime: TaskRuntime) -> tuple[float, Any]:
    """FLOPs of one call of what the candidate replaces, on the current setup (the eager baseline's callable: a
    backward's autograd graph is built before the count, so only the gradient is counted), and what it returned."""
    call = runtime.eager_callable()
    with flops_counted() as total:
        out = call()
    return float(total()), out


def counted_cost(runtime: TaskRuntime, config: TaskConfig) -> Counted | None:
    """The reference's cost for `config`, counted on the meta device; None where it cannot even be set up there.
    A backward's FLOPs are the gradient's alone (`call_flops`)."""
    import torch
    meta = torch.device("meta")
    try:
        with torch.device(meta), torch.no_grad():
            # the init scheme redraws values, never shapes (and would draw a meta tensor's on the CPU)
            runtime.setup(dataclasses.replace(config, init="normal"), config.seed, meta)
            inputs = list(runtime.pristine())
            model = getattr(runtime, "model", None) or getattr(runtime, "_model", None)
            held = tensor_bytes(inputs) + (tensor_bytes(list(model.state_dict().values()))
                                           if hasattr(model, "state_dict") else 0)
            grad_out = getattr(runtime, "grad_out", None)
            held += tensor_bytes(grad_out) + tensor_bytes(getattr(runtime, "_grad_outputs", None) or [])
    except Exception:  # noqa: BLE001 - unknown: the caller says so
        return None
    try:
        with torch.device(meta):
            flops, out = call_flops(runtime)
        return Counted(Cost(flops, float(held + tensor_bytes(list(as_outputs(out))))))
    except Exception as exc:  # noqa: BLE001 - the setup's bytes are most of it; the FLOPs unknown
        why = f"FLOPs not counted: the reference cannot run on the meta device ({type(exc).__name__})"
        return Counted(Cost(0.0, float(held)), why) if held else None
