"""Runtime for native tasks: reference.py's forward_fn / Model / get_inputs (docs/formats.md).

Lazy imports: torch, inside the methods: the judge imports the runtimes before it spawns its runner, so that both
processes import torch at the same time (engine/pipeline/judge_eval.py)."""

from __future__ import annotations

from typing import Any, Callable

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
            return as_outputs(module.backward(self.grad_out, *self.fn_args(inputs)))

    def call_plan(self, inputs: list[Any]) -> CallPlan:
        args = self.fn_args(inputs)
        if self.direction == "forward":
            return CallPlan("fn", "forward", args)
        return CallPlan("fn", "backward", (self.grad_out, *args))

    def compose(self, inputs: list[Any], outputs: list[Any]) -> Outputs:
        import torch
        if self.direction == "forward":  # the task's Model may wrap what fn returns
            with torch.no_grad():
                return as_outputs(self.model(*inputs, fn=stub_fn(outputs)))
        return tuple(outputs)

    def fresh_reference(self, args: tuple) -> Outputs:
        """forward: forward_fn on the arguments, composed by the task's Model as the candidate's outputs are;
        backward: autograd through forward_fn at the arguments after grad_out, with that grad_out."""
        import torch
        if self.direction == "forward":
            with torch.no_grad():
                out = as_outputs(self.ref.forward_fn(*args))
            return self.compose(self.inputs(), list(out))
        saved = self.grad_out
        self.grad_out = args[0]
        try:
            return self._reference_grads(tuple(args[1:]))
        finally:
            self.grad_out = saved

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
        return lambda: module.backward(self.grad_out, *args)
