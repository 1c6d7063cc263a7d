"""The judge's second opinion on a checked call that misses its reference: the same reference computed in float64 on
exactly the call's inputs.

The reference runs in the task's dtype, and its own rounding can exceed a tight tolerance: on robust-kbench's
llama_rmsnorm folder (atol = rtol = 1e-5) grad_weight is a float32 sum over 16,384 rows whose rounding error is of
the order of 1e-5 to 1e-4 in any summation order, and kbench's baseline missed the float32 reference there by 9.2e-5
on values near 2. A kernel closer to the true value than the reference can fail against it, and a ReLU decision
within that rounding of zero may fall either way. A call whose outputs match the reference in structure but miss it
in value is compared once more, at the task's own tolerance, against the reference in float64 (its model, its inputs
and the call's fresh values widened; the result rounded to the outputs' dtypes): within that, it is correct. Nothing
is loosened: the tolerance is the task's, and the float64 values are what the float32 ones approximate. A reference
that casts to float32 itself (robust-kbench's llama_rmsnorm computes its rms from `x.float()`, meant to lift half
precision) keeps float64 there: otherwise the second opinion carries that float32 rounding too, of the order of the
tolerance on that folder, and an exact kernel misses it. A reference that cannot run in float64 (it fixes a dtype
some other way) gives no second opinion, one whose random draws depend on the dtype gives one that matches nothing:
either way the first comparison stands.

Each config's checked calls get at most TRIES second opinions that do not rescue the call: a wrong kernel costs the
judge that many float64 references, not one per call. The judge's own lack of memory for one is no second opinion.

Lazy imports: torch, inside the functions (the judge loads torch after its runner is spawned).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.harness.compare import Comparison
from engine.pipeline.judge.configs import seeded
from engine.pipeline.judge.parking import loaded
from engine.pipeline.protocol import wire

if TYPE_CHECKING:
    from engine.harness.runtimes.base import TaskRuntime
    from engine.pipeline.judge.analysis import Tolerance
    from engine.pipeline.judge.configs import Prepared

TRIES = 2   # second opinions per config that may fail before the judge stops asking for them


def widened(x: Any) -> Any:
    """`x` with every floating-point tensor in float64 and every module a float64 copy (the original untouched)."""
    import torch
    if isinstance(x, torch.Tensor):
        return x.double() if x.is_floating_point() else x
    if isinstance(x, torch.nn.Module):
        return copy.deepcopy(x).double()
    if isinstance(x, (list, tuple)):
        return type(x)(widened(e) for e in x)
    if isinstance(x, dict):
        return {k: widened(v) for k, v in x.items()}
    return x


Remake = Callable[[list[Any]], list[Any]]   # a variant's argument tensors -> the call's fresh ones


def _as64(a: Any) -> Any:
    import torch
    if a is torch.float32:
        return torch.float64
    return a.replace("FloatTensor", "DoubleTensor") if isinstance(a, str) and a.endswith("FloatTensor") else a


def keeping_float64() -> Any:
    """A torch function mode under which a float64 tensor cast to float32 (`.float()`, `.to(torch.float32)`,
    `.type(torch.float32)`) stays float64: the reference's own casts do not round its second opinion."""
    import torch
    from torch.overrides import TorchFunctionMode

    casts = (torch.Tensor.to, torch.Tensor.type)

    class KeepFloat64(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if args and isinstance(args[0], torch.Tensor) and args[0].dtype == torch.float64:
                if func is torch.Tensor.float:
                    return args[0]
                if func in casts:
                    args = (args[0], *(_as64(a) for a in args[1:]))
                    kwargs = {k: _as64(a) if k == "dtype" else a for k, a in kwargs.items()}
            return func(*args, **kwargs)
    return KeepFloat64()


def reference64(runtime: TaskRuntime, prep: Prepared, v: int, remake: Remake | None) -> tuple | None:
    """The reference of a call of variant `v` (as engine/pipeline/judge/fresh.py's `expected_of` computes it: on the
    tensors `remake` gives the call, or on the variant's own inputs where it has no fresh values), with the setup and
    the call's arguments in float64; None where the reference does not stay in float64 or cannot run there."""
    import torch
    with loaded(runtime, prep, v, outputs=False) as var:
        saved = runtime.save_state()
        try:
            runtime.restore_state({k: widened(x) for k, x in saved.items()})
            if remake is not None:
                tensors: list[Any] = []
                tree = wire.encode_args(tuple(var.plan.args), tensors)
                args = tuple(wire.decode_args(tree, [widened(t) for t in remake(tensors)]))
                del tensors
                with keeping_float64():
                    out = tuple(seeded(var.plan.call_seed, lambda: runtime.fresh_reference(args)))
            else:   # the variant's own inputs, as `prepare` computed its reference
                with keeping_float64():
                    out = tuple(seeded(var.plan.call_seed, lambda: runtime.reference(runtime.inputs())))
        except torch.OutOfMemoryError:
            return None
        except Exception:  # noqa: BLE001 - the task's reference in float64: a second opinion, not a verdict
            return None
        finally:
            runtime.restore_state(saved)
            if torch.cuda.is_initialized():   # its float64 temporaries go back before the next call is compared
                torch.cuda.empty_cache()
    floats = [t for t in out if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return out if floats and all(t.dtype == torch.float64 for t in floats) else None


def _same_layout(got: tuple, ref: tuple) -> bool:
    import torch
    return len(got) == len(ref) and all(
        (isinstance(g, torch.Tensor) and isinstance(r, torch.Tensor) and g.shape == r.shape and g.dtype == r.dtype)
        or not (isinstance(g, torch.Tensor) or isinstance(r, torch.Tensor)) for g, r in zip(got, ref))


def _narrowed(ref64: tuple, ref: tuple) -> tuple:
    """The float64 reference rounded to the task-dtype reference's dtypes, on its devices."""
    import torch
    return tuple(x.to(device=r.device, dtype=r.dtype) if isinstance(x, torch.Tensor) and isinstance(r, torch.Tensor)
                 else x for x, r in zip(ref64, ref))


Opinion = Callable[[tuple, tuple, Comparison, "Tolerance"], Comparison]   # (got, ref, first, tol) -> verdict


class ExactReferences:
    """A config's second opinions, call by call; after TRIES that did not rescue their call, none."""

    def __init__(self, runtime: TaskRuntime, prep: Prepared):
        self.runtime, self.prep = runtime, prep
        self.failed = 0

    def opinion(self, v: int, remake: Remake | None) -> Opinion:
        """How a miss of the reference of a call of variant `v` (its fresh tensors from `remake`) is judged again:
        the first comparison, or a pass where the call's outputs are within the tolerance of its float64 reference."""
        def judge(got: tuple, ref: tuple, first: Comparison, tol: Tolerance) -> Comparison:
            if first.ok or self.failed >= TRIES or not _same_layout(got, ref):
                return first
            ref64 = reference64(self.runtime, self.prep, v, remake)
            again = tol.compare(got, _narrowed(ref64, ref)) if ref64 is not None and len(ref64) == len(ref) else None
            del ref64
            if again is None or not again.ok:
                self.failed += 1
                return first
            return again
        return judge
