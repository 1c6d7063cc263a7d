"""Runtime for native tasks: reference.py's forward_fn / Model / get_inputs (docs/formats.md).

Lazy imports: torch, inside the methods: the judge imports the runtimes before it spawns its runner, so that both
processes import torch at the same time (engine/pipeline/judge/evaluation.py)."""

from __future__ import annotations

from typing import Any, Callable

from engine.harness.runtimes import autograd_fn
from engine.harness.runtimes.base import (CallPlan, Outputs, TaskRuntime, as_outputs, import_file, on_device,
                                          seeded_normals, stub_fn)
from engine.tasks.inits import apply_init
from engine.tasks.model import Task, TaskConfig


def grad_positions(args: tuple, skip: tuple[int, ...] = ()) -> list[int]:
    """Positions that get a gradient: floating-point tensors, minus the task's no_grad arguments."""
    import torch
    return [i for i, a in enumerate(args)
            if isinstance(a, torch.Tensor) and a.is_floating_point() and i not in skip]


class NativeRuntime(TaskRuntime):
    def __init__(self, task: Task, direction: str):
        super().__init__(task, direction)
        self.ref = import_file(self.spec.reference_path, f"kbench_reference_{task.name}_{direction}")
        self.model: Any = None
        self._pristine: list[Any] = []
        self.grad_out: Any = None
        # robust-kbench's convention (a reference.py with AutogradFunction): the kernel is its backward_fn
        self.autograd = direction == "backward" and self.spec.autograd_backward
        self._sources: list[Any] = []   # per tensor of the backward_fn call: "grad", fn's argument i, or None

    # -- setup -------------------------------------------------------------------------------
    def setup(self, config: TaskConfig, seed: int, device: Any) -> None:
        import torch

        # The last setup's tensors go first: a GiB input is not held twice while the next one is drawn.
        self.model, self._pristine, self.grad_out = None, [], None

        def build_model() -> Any:
            torch.manual_seed(seed)
            return self.ref.Model(**config.model_kwargs)

        def build_inputs() -> list[Any]:
            torch.manual_seed(seed + 1)
            return list(self.ref.get_inputs(**config.input_kwargs))

        # Drawn on `device` where it is CUDA (on_device: on the CPU, as before, where the task's code needs it);
        # the init scheme redraws each tensor where it lies.
        self.model = on_device(device, build_model).to(device).eval()
        inputs = apply_init(on_device(device, build_inputs), config.init, seed)
        self._pristine = [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]
        del inputs  # a CPU fallback's host copies
        if self.direction == "backward":
            with torch.no_grad():
                out = self.model(*self.inputs())
            if not isinstance(out, torch.Tensor):
                raise TypeError("a backward task's forward must return one tensor")
            self.grad_out = seeded_normals([(out.shape, out.dtype)], device, seed + 2)[0]

    def pristine(self) -> list[Any]:
        return self._pristine

    def fn_args(self, inputs: list[Any]) -> tuple:
        """The arguments Model.forward passes to fn for these inputs (parameters detached)."""
        import torch

        captured: list[tuple] = []

        def capture(*args: Any) -> Any:
            captured.append(args)
            return self.ref.forward_fn(*args)

        with torch.no_grad():
            self.model(*inputs, fn=capture)
        if len(captured) != 1:
            raise RuntimeError(f"Model.forward called fn {len(captured)} times; a task must call it once")
        return tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in captured[0])

    # -- forward -----------------------------------------------------------------------------
    def reference(self, inputs: list[Any]) -> Outputs:
        import torch

        if self.direction == "forward":
            with torch.no_grad():
                return as_outputs(self.model(*inputs))
        return self._reference_grads(self.fn_args(inputs))

    def candidate(self, module: Any, inputs: list[Any]) -> Outputs:
        import torch

        with torch.no_grad():
            if self.direction == "forward":
                return as_outputs(self.model(*inputs, fn=module.forward))
            if self.autograd:
                return self._autograd_grads(self.fn_args(inputs), module.backward)
            return as_outputs(module.backward(self.grad_out, *self.fn_args(inputs)))

    def call_plan(self, inputs: list[Any]) -> CallPlan:
        args = self.fn_args(inputs)
        if self.direction == "forward":
            return CallPlan("fn", "forward", args)
        if self.autograd:
            return CallPlan("fn", "backward", self.backward_fn_args(args))
        return CallPlan("fn", "backward", (self.grad_out, *args))

    def compose(self, inputs: list[Any], outputs: list[Any]) -> Outputs:
        import torch
        if self.direction == "forward":  # the task's Model may wrap what fn returns
            with torch.no_grad():
                return as_outputs(self.model(*inputs, fn=stub_fn(outputs)))
        if self.autograd:   # AutogradFunction.backward turns what its backward_fn returned into the gradients
            return self._autograd_grads(self.fn_args(inputs), stub_fn(outputs))
        return tuple(outputs)

    def fresh_reference(self, args: tuple) -> Outputs:
        """forward: forward_fn on the arguments, composed by the task's Model as the candidate's outputs are;
        backward: autograd through forward_fn at the arguments after grad_out, with that grad_out."""
        import torch
        if self.direction == "forward":
            with torch.no_grad():
                out = as_outputs(self.ref.forward_fn(*args))
            return self.compose(self.inputs(), list(out))
        grad_out, fn_args = (self._sources_replaced(args) if self.autograd else (args[0], tuple(args[1:])))
        saved = self.grad_out
        self.grad_out = grad_out
        try:
            return self._reference_grads(fn_args)
        finally:
            self.grad_out = saved

    def freshable(self, tensors: list[Any]) -> list[bool]:
        """robust-kbench's convention: a backward_fn argument may be given fresh values where it is the grad_output
        or one of fn's floating-point arguments as they are (a value AutogradFunction derived from them, or saved
        from its forward's work, cannot be varied on its own)."""
        if not self.autograd:
            return super().freshable(tensors)
        return [s is not None for s in self._sources]

    # -- backward: robust-kbench's AutogradFunction convention ---------------------------------
    def _autograd_grads(self, args: tuple, kernel: Any) -> Outputs:
        """The gradients of fn's floating-point arguments through `AutogradFunction.apply(*args)` with `kernel` as
        its backward_fn: what the task's AutogradFunction.backward makes of the kernel's result."""
        import torch
        cls = getattr(self.ref, autograd_fn.AUTOGRAD_CLASS)
        calls = [0]

        def counted(*a: Any) -> Any:
            calls[0] += 1
            return autograd_fn.as_tuple(kernel(*a))

        leaves, wrt = self._leaves(args)

        def run() -> Any:
            with torch.enable_grad():
                out = cls.apply(*leaves)
                return torch.autograd.grad(out, wrt, self.grad_out, allow_unused=True)
        grads = autograd_fn.with_backward_fn(cls, counted, run)
        if not calls[0]:
            raise RuntimeError(f"{self.spec.reference_path.name}: {autograd_fn.AUTOGRAD_CLASS}.backward never called "
                               "backward_fn")
        return tuple(torch.zeros_like(w) if g is None else g for g, w in zip(grads, wrt))

    def backward_fn_args(self, args: tuple) -> tuple:
        """What AutogradFunction.backward passes to backward_fn for fn's arguments `args` and the fixed grad_out
        (nested tuples kept, tensors detached). Each tensor's source is kept for the fresh-input check: the
        grad_output ("grad"), fn's argument i (i), or None (derived: not varied)."""
        import torch
        cls = getattr(self.ref, autograd_fn.AUTOGRAD_CLASS)
        leaves, wrt = self._leaves(args)

        def run() -> Any:
            with torch.enable_grad():
                torch.autograd.grad(cls.apply(*leaves), wrt, self.grad_out, allow_unused=True)
        calls = autograd_fn.capture_calls(cls, run)
        if len(calls) != 1:
            raise RuntimeError(f"{self.spec.reference_path.name}: {autograd_fn.AUTOGRAD_CLASS}.backward called "
                               f"backward_fn {len(calls)} times; the judge supports one call")

        def source(t: Any) -> Any:
            for key, s in [("grad", self.grad_out)] + list(enumerate(leaves)):
                if isinstance(s, torch.Tensor) and s.is_floating_point() and t.data_ptr() == s.data_ptr() \
                        and t.shape == s.shape and t.stride() == s.stride():
                    return key
            return None
        self._sources = [source(t) for t in autograd_fn.tensor_leaves(calls[0])]
        return calls[0]

    def _sources_replaced(self, call_args: tuple) -> tuple[Any, tuple]:
        """(grad_out, fn_args) with the values `call_args` (a backward_fn call, some given fresh values) holds for
        them; the rest as the current setup has them."""
        grad_out, fn_args = self.grad_out, list(self.fn_args(self.inputs()))
        for src, t in zip(self._sources, autograd_fn.tensor_leaves(call_args)):
            if src == "grad":
                grad_out = t
            elif src is not None:
                fn_args[src] = t
        return grad_out, tuple(fn_args)

    # -- backward ----------------------------------------------------------------------------
    def _leaves(self, args: tuple) -> tuple[tuple, list[Any]]:
        idx = set(grad_positions(args, self.spec.no_grad))
        leaves = tuple(a.clone().requires_grad_(True) if i in idx else a for i, a in enumerate(args))
        return leaves, [leaves[i] for i in sorted(idx)]

    def _reference_grads(self, args: tuple) -> Outputs:
        import torch

        leaves, wrt = self._leaves(args)
        with torch.enable_grad():
            out = self.ref.forward_fn(*leaves)
            grads = torch.autograd.grad(out, wrt, self.grad_out, allow_unused=True)
        return tuple(torch.zeros_like(w) if g is None else g for g, w in zip(grads, wrt))

    # -- timing callables ----------------------------------------------------------------------
    def eager_callable(self) -> Callable[[], Any]:
        import torch

        inputs = self.inputs()
        if self.direction == "forward":  # what the candidate replaces: forward_fn on the same arguments
            args = self.fn_args(inputs)

            def run() -> Any:
                with torch.no_grad():
                    return self.ref.forward_fn(*args)
            return run
        leaves, wrt = self._leaves(self.fn_args(inputs))
        with torch.enable_grad():
            out = self.ref.forward_fn(*leaves)
        return lambda: torch.autograd.grad(out, wrt, self.grad_out, retain_graph=True)

    def compiled_callable(self) -> Callable[[], Any] | None:
        import torch

        inputs = self.inputs()
        if self.direction == "forward":
            compiled = torch.compile(self.ref.forward_fn)
            args = self.fn_args(inputs)

            def run() -> Any:
                with torch.no_grad():
                    return compiled(*args)
            return run
        compiled_fn = torch.compile(self.ref.forward_fn)
        leaves, wrt = self._leaves(self.fn_args(inputs))
        with torch.enable_grad():
            out = compiled_fn(*leaves)
        return lambda: torch.autograd.grad(out, wrt, self.grad_out, retain_graph=True)

    def candidate_callable(self, module: Any) -> Callable[[], Any]:
        import torch

        inputs = self.inputs()
        if self.direction == "forward":
            def run() -> Any:
                with torch.no_grad():
                    return self.model(*inputs, fn=module.forward)
            return run
        args = self.fn_args(inputs)
        if self.autograd:
            call = self.backward_fn_args(args)
            return lambda: module.backward(*call)
        return lambda: module.backward(self.grad_out, *args)
