"""The autograd formula of an exported backward kernel that takes robust-kbench's backward convention.

A native task whose reference.py defines `AutogradFunction` (the built-in robust-kbench tasks) calls its backward
kernel with what `AutogradFunction.backward` passes `backward_fn`, not with kbench's generic
`backward(grad_output, *fn_args)`: layernorm's is `(grad_output, x, weight, bias, eps, normalized_shape)`. The
exported op's formula cannot run that method (it needs the ctx its forward filled, i.e. the reference forward), so
export derives how each of the kernel's arguments follows from the gradient and the forward's arguments, by running
the task's AutogradFunction on the CPU on two of its configs with a kernel that records what it is given:

- a tensor that *is* the gradient of the output or one of fn's arguments (same storage, shape and strides) is that;
- a float, int or bool equal to exactly one of fn's scalar arguments of that type is that argument;
- a tuple or list of ints equal to a forward tensor argument's shape is that shape (layernorm's normalized_shape is
  weight's shape).

Every rule must give the recorded value on every config traced. The kernel's results must come back from
AutogradFunction.backward as the gradients of fn's floating-point tensor arguments, in their order (checked with
marker results), and each of those arguments must be among the kernel's, so the fake (meta) implementation knows
each result's shape. Anything else (a tuple of saved tensors, a value derived otherwise) raises ExportError naming
the argument: export then ships the forward kernel alone.

Lazy imports: torch and the harness's runtimes, inside the functions: planning an export that has no such backward
(most) never loads torch, and `kbench export` starts without it.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.export.errors import ExportError
from engine.export.schema import Arg, OpSchema, parse_signature
from engine.tasks.model import Task, direction_configs

__all__ = ["CallArg", "derive_call", "autograd_backward_schema"]


@dataclass(frozen=True)
class CallArg:
    """How the formula builds one argument of the backward kernel."""
    source: str          # "grad": the output's gradient; "arg": fn's argument `index`; "shape": its shape
    index: int = -1

    def to_json(self) -> dict[str, Any]:
        return {"from": self.source, **({"index": self.index} if self.source != "grad" else {})}

    def value(self, grad: Any, args: tuple) -> Any:
        if self.source == "grad":
            return grad
        if self.source == "arg":
            return args[self.index]
        return tuple(args[self.index].shape)


@dataclass(frozen=True)
class DerivedCall:
    call: tuple[CallArg, ...]
    grad_positions: tuple[int, ...]      # fn's arguments whose gradients the kernel returns, in its order


def _configs(task: Task) -> list[Any]:
    """The two smallest configs of the backward direction (CPU-sized), of different sizes where the task has them."""
    names = set(direction_configs(task, "backward"))
    configs = [c for c in task.configs if c.name in names] or list(task.configs)

    def size(c: Any) -> int:
        return sum(v for v in {**c.model_kwargs, **c.input_kwargs}.values() if isinstance(v, int))
    configs.sort(key=size)
    out = configs[:1]
    for c in configs[1:]:
        if size(c) != size(out[0]):
            out.append(c)
            break
    return out


def _rule(value: Any, source: Any, args: tuple, name: str, names: list[str], task: Task) -> CallArg:
    import torch
    where = f"task {task.name!r}: AutogradFunction.backward passes backward_fn `{name}`"
    if isinstance(value, torch.Tensor):
        if source == "grad":
            return CallArg("grad")
        if isinstance(source, int):
            return CallArg("arg", source)
        raise ExportError(f"{where}, a tensor that is neither the output's gradient nor one of fn's arguments: "
                          "the exported op has no formula for it.")
    if isinstance(value, (bool, int, float)):
        same = [i for i, a in enumerate(args) if type(a) is type(value) and a == value]
        if len(same) > 1:   # several equal scalars: the one of the same name, if any
            same = [i for i in same if i < len(names) and names[i] == name] or same
        if len(same) != 1:
            raise ExportError(f"{where} = {value!r}, which is {'none' if not same else 'more than one'} of fn's "
                              "scalar arguments: the exported op has no formula for it.")
        return CallArg("arg", same[0])
    if isinstance(value, (tuple, list)) and all(type(v) is int for v in value):
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and tuple(a.shape) == tuple(value):
                return CallArg("shape", i)
        raise ExportError(f"{where} = {tuple(value)}, which is no forward tensor argument's shape: the exported op "
                          "has no formula for it.")
    raise ExportError(f"{where}, a {type(value).__name__} (a tuple of saved tensors, or another value) that the "
                      "exported op cannot pass: export the forward kernel alone (--no-backward).")


def derive_call(task: Task, reference_text: str | None = None) -> DerivedCall:
    """The backward kernel's arguments as the gradient and fn's arguments give them (module docstring). The
    reference runs from `reference_text` when given (a workspace's committed reference), else from the task."""
    import torch

    from engine.harness.runtimes.autograd_fn import tensor_leaves
    from engine.harness.runtimes.native import NativeRuntime

    spec = task.spec("backward")
    with tempfile.TemporaryDirectory(prefix="kbench-export-ref-") as tmp:
        if reference_text is not None:
            path = Path(tmp) / Path(spec.reference_path).name
            path.write_text(reference_text)
            task = dataclasses.replace(task, directions={**task.directions,
                                                         "backward": dataclasses.replace(spec, reference_path=path)})
        rt = NativeRuntime(task, "backward")
        _, bparams, _ = parse_signature(spec.signature)
        _, fparams, _ = parse_signature(task.spec("forward").signature)
        fnames = [n for n, _ in fparams]
        found: DerivedCall | None = None
        with torch.no_grad():
            for cfg in _configs(task):
                rt.setup(cfg, cfg.seed, "cpu")
                args = tuple(rt.fn_args(rt.inputs()))
                call = rt.backward_fn_args(args)
                if len(call) != len(bparams):
                    raise ExportError(f"task {task.name!r}: AutogradFunction.backward passes backward_fn "
                                      f"{len(call)} argument(s), its backward signature lists {len(bparams)}.")
                sources = iter(rt._sources)
                rules = []
                for (name, _), value in zip(bparams, call):
                    src = next(sources) if isinstance(value, torch.Tensor) else None
                    if not isinstance(value, torch.Tensor) and tensor_leaves(value):
                        raise ExportError(f"task {task.name!r}: AutogradFunction.backward passes backward_fn "
                                          f"`{name}`, a tuple of tensors (its saved tensors) that the exported op "
                                          "cannot pass: export the forward kernel alone (--no-backward).")
                    rules.append(_rule(value, src, args, name, fnames, task))
                for rule, value, (name, _) in zip(rules, call, bparams):
                    got = rule.value(rt.grad_out, args)
                    same = (got is rt.grad_out or any(got is a for a in args)) if isinstance(got, torch.Tensor) \
                        else got == (tuple(value) if isinstance(value, list) else value)
                    if not same:
                        raise ExportError(f"task {task.name!r}: backward_fn's `{name}` follows no one rule on "
                                          f"config {cfg.name!r}: the exported op has no formula for it.")
                positions = tuple(_grad_order(rt, args, task))
                here = DerivedCall(tuple(rules), positions)
                if found is not None and here != found:
                    raise ExportError(f"task {task.name!r}: AutogradFunction.backward passes backward_fn different "
                                      f"arguments on config {cfg.name!r} than on the others: the exported op has no "
                                      "one formula for them.")
                found = here
    assert found is not None
    passed = {c.index for c in found.call if c.source == "arg"}
    missing = [fnames[i] for i in found.grad_positions if i not in passed]
    if missing:
        raise ExportError(f"task {task.name!r}: the backward kernel returns the gradient of {', '.join(missing)} "
                          "without receiving it, so the exported op's fake (meta) implementation cannot give that "
                          "gradient's shape: export the forward kernel alone (--no-backward).")
    return found


def _grad_order(rt: Any, args: tuple, task: Task) -> list[int]:
    """fn's arguments whose gradients AutogradFunction.backward takes from the kernel's results, checked to be the
    results in order: the k-th result is filled with k + 1 and must come back as the k-th gradient."""
    import torch
    from engine.harness.runtimes.native import grad_positions
    positions = grad_positions(args, rt.spec.no_grad)
    markers = [torch.full_like(args[i], float(k + 1)) for k, i in enumerate(positions)]
    grads = rt._autograd_grads(args, lambda *_: tuple(m.clone() for m in markers))
    if len(grads) != len(markers) or not all(torch.equal(g, m) for g, m in zip(grads, markers)):
        raise ExportError(f"task {task.name!r}: AutogradFunction.backward does not return the backward kernel's "
                          "results as the gradients of fn's floating-point tensor arguments in their order; the "
                          "exported op has no formula for it.")
    return positions


def autograd_backward_schema(forward: OpSchema, task: Task, derived: DerivedCall, entry: Any = None) -> OpSchema:
    """The backward op: the kernel's own arguments (named as the backward signature names them, typed by where
    they come from), returning the gradients in fn's order."""
    if forward.returns_list:
        raise ExportError("a backward kernel needs a forward that returns one tensor (the task's forward returns "
                          "several), so no autograd formula can be registered for it.")
    _, params, _ = parse_signature(task.spec("backward").signature)
    if entry is not None and entry.params is not None and len(entry.params) != len(params):
        raise ExportError(f"the backward binding's {entry.function} takes {len(entry.params)} argument(s), the "
                          f"backward signature {len(params)}.")
    args, seen = [], set()
    for i, ((name, _), c) in enumerate(zip(params, derived.call)):
        if c.source == "grad":
            kind, optional = "Tensor", False
        elif c.source == "shape":
            kind, optional = "int[]", False
        else:
            kind, optional = forward.args[c.index].kind, forward.args[c.index].optional
        sname = name if name.isidentifier() and name not in seen and name not in ("Tensor", "float", "int", "bool") \
            else f"arg{i}"
        seen.add(sname)
        args.append(Arg(sname, kind, optional))
    return OpSchema("backward", tuple(args), True, grad_positions=derived.grad_positions)
