"""robust-kbench's backward convention, shared by the runtimes that use it (robust-kbench folders, and native tasks
whose reference.py defines `AutogradFunction`: the built-in robust-kbench tasks).

The task's `AutogradFunction(torch.autograd.Function)` has a class attribute `backward_fn = None`; its `backward`
calls `AutogradFunction.backward_fn(...)` with task-specific arguments (`(grad_output, x, weights)` for a linear
layer, `(ctx.saved_tensors, grad_output)` for a max-pool). The evaluator sets the attribute to the candidate's
`backward` for the call and restores it afterwards.

Lazy imports: torch, inside the functions: the judge imports the runtimes before it spawns its runner, so that
both processes import torch at the same time (engine/pipeline/judge/evaluation.py).
"""

from __future__ import annotations

from typing import Any, Callable

from engine.tasks.robust_kbench import AUTOGRAD_CLASS

__all__ = ["AUTOGRAD_CLASS", "Captured", "as_tuple", "capture_calls", "detached", "tensor_leaves", "with_backward_fn"]


class Captured(Exception):
    """Raised by a capturing backward_fn to stop backpropagation once its arguments are known."""


def with_backward_fn(cls: Any, kernel: Callable[..., Any], run: Callable[[], Any]) -> Any:
    """Run `run()` with `cls.backward_fn = kernel`, restoring the attribute whatever happens."""
    original = cls.__dict__.get("backward_fn")
    cls.backward_fn = kernel
    try:
        return run()
    finally:
        cls.backward_fn = original


def detached(value: Any) -> Any:
    """`value` with every tensor detached, nested tuples and lists kept (a max-pool's `ctx.saved_tensors`)."""
    import torch
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (tuple, list)):
        return type(value)(detached(v) for v in value)
    return value


def as_tuple(grads: Any) -> Any:
    """A pybind `std::vector` comes back as a list; AutogradFunction.backward unpacks or returns it as a tuple."""
    return tuple(grads) if isinstance(grads, list) else grads


def capture_calls(cls: Any, run: Callable[[], Any]) -> list[tuple]:
    """The argument tuples `cls.backward` passes to `backward_fn` while `run()` backpropagates, detached; the
    backpropagation stops at the first call."""
    captured: list[tuple] = []

    def stop(*args: Any) -> Any:
        captured.append(tuple(detached(a) for a in args))
        raise Captured

    try:
        with_backward_fn(cls, stop, run)
    except Captured:
        pass
    return captured


def tensor_leaves(value: Any) -> list[Any]:
    """The tensors of a nested argument tree, depth first (the wire's order: engine/pipeline/protocol/wire.py)."""
    import torch
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensor_leaves(v)]
    return []
