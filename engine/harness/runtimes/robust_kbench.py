"""Runtime for robust-kbench tasks (docs/formats.md, "robust-kbench import").

Forward: the candidate replaces `fn`: `model(*inputs, fn=candidate.forward)`.
Backward: the candidate replaces the reference module's global `backward_fn`, which the task's
AutogradFunction.backward calls; gradients of every float input and every parameter are compared.
Backward timing calls the function alone, on the arguments AutogradFunction.backward passes it.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

from engine.harness.runtimes.base import CallPlan, Outputs, TaskRuntime, as_outputs, import_file, stub_fn
from engine.tasks.inits import apply_init
from engine.tasks.model import Task, TaskConfig

GRAD_OUTPUT_SALT = 1_000_003  # keeps grad_output's stream apart from the inputs' for the same seed


def module_name(prefix: str, path: Any) -> str:
    return f"{prefix}_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"


def to_device(values: list[Any], device: Any) -> list[Any]:
    import torch
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def is_float_tensor(value: Any) -> bool:
    import torch
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def no_grad_call(fn: Callable[..., Any], args: list[Any] | tuple) -> Callable[[], Any]:
    import torch

    def call() -> Any:
        with torch.no_grad():
            return fn(*args)
    return call


def try_compile(fn: Callable[..., Any], args: list[Any] | tuple) -> Callable[[], Any] | None:
    """torch.compile `fn` and run it once; any failure (no compiler, unsupported op) means None."""
    import torch
    try:
        call = no_grad_call(torch.compile(fn), args)
        call()
    except Exception:  # noqa: BLE001 - a baseline that cannot compile is simply absent
        return None
    return call


class RobustKbenchRuntime(TaskRuntime):
    def __init__(self, task: Task, direction: str):
        super().__init__(task, direction)
        self._module: Any = None
        self._model: Any = None
        self._inputs: list[Any] = []
        self._grad_outputs: list[Any] = []
        self._reference_backward: Callable[..., Any] | None = None  # the task's own backward_fn

    @property
    def reference_module(self) -> Any:
        if self._module is None:
            path = self.spec.reference_path
            self._module = import_file(path, module_name(f"kbench_rkb_{self.direction}", path))
            self._reference_backward = getattr(self._module, "backward_fn", None)
        return self._module

    @property
    def reference_backward(self) -> Callable[..., Any]:
        """The task's own backward_fn, as imported (the module global may be swapped at times)."""
        self.reference_module  # noqa: B018 - importing records it
        if self._reference_backward is None:
            raise AttributeError(f"{self.spec.reference_path.name} defines no backward_fn")
        return self._reference_backward

    def setup(self, config: TaskConfig, seed: int, device: Any) -> None:
        import torch
        mod = self.reference_module
        # Built on the CPU under fixed seeds, then moved: the same draws whatever the device. Inputs get
        # seed + 1 so that they do not repeat the weights' draws (x[0] == weight[0] would hide mix-ups).
        torch.manual_seed(seed)
        model = mod.Model(**config.model_kwargs)
        torch.manual_seed(seed + 1)
        inputs = apply_init(list(mod.get_inputs(**config.input_kwargs)), config.init, seed)
        self._model = model.to(device).eval()
        self._inputs = to_device(inputs, device)
        if self.direction == "backward":
            self._grad_outputs = self._make_grad_outputs(seed, device)

    def pristine(self) -> list[Any]:
        return self._inputs

    def _make_grad_outputs(self, seed: int, device: Any) -> list[Any]:
        import torch
        with torch.no_grad():
            outs = as_outputs(self._model(*self.inputs()))
        gen = torch.Generator().manual_seed(seed * GRAD_OUTPUT_SALT + 7)
        return [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(device) for o in outs if is_float_tensor(o)]

    # --- forward -----------------------------------------------------------------------------------------

    def _forward(self, inputs: list[Any], fn: Callable[..., Any] | None) -> Outputs:
        import torch
        with torch.no_grad():
            out = self._model(*inputs) if fn is None else self._model(*inputs, fn=fn)
        return as_outputs(out)

    # --- backward ----------------------------------------------------------------------------------------

    def _gradients(self, inputs: list[Any]) -> Outputs:
        """Gradients of every float input, then every parameter, for the fixed grad_output."""
        import torch
        leaves = [t.detach().requires_grad_(True) if is_float_tensor(t) else t for t in inputs]
        wrt = [t for t in leaves if is_float_tensor(t)] + [p for p in self._model.parameters() if p.requires_grad]
        with torch.enable_grad():
            outs = [o for o in as_outputs(self._model(*leaves)) if is_float_tensor(o)]
        if not outs or not all(o.requires_grad for o in outs):
            raise RuntimeError(f"{self.spec.reference_path.name}: the forward output does not require grad, so "
                               "there is no backward to check (does forward_fn go through AutogradFunction?).")
        grads = torch.autograd.grad(outs, wrt, self._grad_outputs[:len(outs)], allow_unused=True)
        # An input the output does not depend on has a zero gradient; None would not compare.
        return tuple(torch.zeros_like(w) if g is None else g for g, w in zip(grads, wrt))

    def _gradients_with(self, backward: Callable[..., Any], inputs: list[Any]) -> Outputs:
        """Run with the module's `backward_fn` swapped for `backward`, restoring it whatever happens."""
        mod = self.reference_module
        original = mod.backward_fn
        calls = [0]

        def counted(*args: Any) -> Any:
            calls[0] += 1
            grads = backward(*args)
            # autograd reads a list as one gradient; a pybind std::vector comes back as a list.
            return tuple(grads) if isinstance(grads, list) else grads

        mod.backward_fn = counted
        try:
            grads = self._gradients(inputs)
        finally:
            mod.backward_fn = original
        if not calls[0]:
            # Otherwise the reference gradients would come back and a candidate would pass unseen.
            raise RuntimeError(f"{self.spec.reference_path.name}: the candidate's backward was never called; "
                               "AutogradFunction.backward must call the module-level backward_fn.")
        return grads

    def backward_args(self, inputs: list[Any]) -> tuple:
        """The arguments AutogradFunction.backward passes to backward_fn for these inputs (detached)."""
        import torch
        captured: list[tuple] = []
        reference = self.reference_backward

        def capture(*args: Any) -> Any:
            captured.append(args)
            return reference(*args)

        self._gradients_with(capture, inputs)
        return tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in captured[0])

    # --- TaskRuntime ---------------------------------------------------------------------------------------

    def reference(self, inputs: list[Any]) -> Outputs:
        if self.direction == "forward":
            return self._forward(inputs, None)
        return self._gradients(inputs)

    def candidate(self, module: Any, inputs: list[Any]) -> Outputs:
        if self.direction == "forward":
            return self._forward(inputs, module.forward)
        return self._gradients_with(module.backward, inputs)

    def forward_args(self, inputs: list[Any]) -> tuple:
        """The arguments Model.forward passes to fn for these inputs (detached)."""
        import torch
        captured: list[tuple] = []
        reference = self.reference_module.forward_fn

        def capture(*args: Any) -> Any:
            captured.append(args)
            return reference(*args)

        self._forward(inputs, capture)
        if len(captured) != 1:
            raise RuntimeError(f"Model.forward called fn {len(captured)} times; a task must call it once")
        return tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in captured[0])

    def call_plan(self, inputs: list[Any]) -> CallPlan:
        if self.direction == "forward":
            return CallPlan("fn", "forward", self.forward_args(inputs))
        return CallPlan("fn", "backward", self.backward_args(inputs))

    def compose(self, inputs: list[Any], outputs: list[Any]) -> Outputs:
        """Forward: the model's output with fn returning the candidate's result. Backward: the gradients the
        task's AutogradFunction produces when its backward_fn returns the candidate's result."""
        if self.direction == "forward":
            return self._forward(inputs, stub_fn(outputs))
        return self._gradients_with(stub_fn(outputs), inputs)

    # Timing: forward times forward_fn on fn's arguments (what the candidate replaces); backward times
    # backward_fn alone, as a kernel would be.

    def eager_callable(self) -> Callable[[], Any]:
        if self.direction == "forward":
            return no_grad_call(self.reference_module.forward_fn, self.forward_args(self.inputs()))
        return no_grad_call(self.reference_backward, self.backward_args(self.inputs()))

    def candidate_callable(self, module: Any) -> Callable[[], Any]:
        if self.direction == "forward":
            return no_grad_call(lambda *a: self._model(*a, fn=module.forward), self.inputs())
        return no_grad_call(module.backward, self.backward_args(self.inputs()))

    def compiled_callable(self) -> Callable[[], Any] | None:
        if self.direction == "forward":
            return try_compile(self.reference_module.forward_fn, self.forward_args(self.inputs()))
        return try_compile(self.reference_backward, self.backward_args(self.inputs()))
