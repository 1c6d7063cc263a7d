"""Runtime for robust-kbench tasks (docs/formats.md, "robust-kbench import"), with upstream's calling conventions.

Forward: the candidate replaces `fn`: `model(*inputs, fn=candidate.forward)`.
Backward: the candidate's `backward` is set as the class attribute `AutogradFunction.backward_fn`, the model runs
as `model(*inputs, fn=AutogradFunction.apply)` and the gradients of the inputs that require grad and of every
parameter are collected after backpropagating a fixed `grad_output`; the reference gradients come from plain
autograd through `forward_fn`. The model stays in the mode it was built in (training, as upstream runs it).

For an evaluator that keeps candidate code in another process, `kernel_calls` gives the exact arguments the
candidate's entry point receives and `outputs_from_kernel` turns what it returned into the result to compare.

Lazy imports: torch, inside the methods: the judge imports the runtimes before it spawns its runner, so that both
processes import torch at the same time (engine/pipeline/judge/evaluation.py).
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any, Callable

from engine.harness.runtimes.autograd_fn import AUTOGRAD_CLASS, as_tuple, capture_calls, detached, with_backward_fn
from engine.harness.runtimes.base import (CallPlan, Outputs, TaskRuntime, as_outputs, import_file, on_device,
                                          seeded_normals, stub_fn)
from engine.tasks.inits import apply_init
from engine.tasks.model import Task, TaskConfig

GRAD_OUTPUT_SALT = 1_000_003  # keeps grad_output's stream apart from the inputs' for the same seed


def module_name(prefix: str, path: Any) -> str:
    return f"{prefix}_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"


def to_device(values: list[Any], device: Any) -> list[Any]:
    """Tensors moved to `device` as new leaves that keep their requires_grad flag (a CPU leaf that requires grad
    would otherwise come back as a non-leaf copy)."""
    import torch
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            moved = v.detach().to(device)
            out.append(moved.requires_grad_(True) if v.requires_grad else moved)
        else:
            out.append(v)
    return out


def is_float_tensor(value: Any) -> bool:
    import torch
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def accepted_kwargs(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keys of `kwargs` that `fn` takes (all of them when it has **kwargs). The loader has checked that each
    key belongs to some module of the task; this direction's module may take fewer."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return dict(kwargs)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(kwargs)
    return {k: v for k, v in kwargs.items() if k in params}


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


class ModelState:
    """A copy of a model's parameters and buffers, written back before each reference or candidate call (and after
    a forward one: RobustKbenchRuntime._forward), so a candidate that writes into a weight cannot change what the
    reference computes next, and a training-mode BatchNorm's running statistics start every call from the same values.

    The copy is kept in host memory (page-locked where there is a GPU, so writing it back is a fast copy): on the
    GPU it would double the weights the judge holds for a config (a KernelBench level 3 model's)."""

    def __init__(self, model: Any):
        import torch
        pin = torch.cuda.is_available()

        def host(t: Any) -> Any:
            if not t.is_cuda:   # on the CPU already, or the meta device (sizes only: nothing to copy out)
                return t.detach().clone()
            copy = t.detach().to("cpu", copy=True)
            return copy.pin_memory() if pin else copy
        self.saved = [(t, host(t)) for t in list(model.parameters()) + list(model.buffers())]

    def restore(self) -> None:
        import torch
        with torch.no_grad():
            for live, saved in self.saved:
                if live.shape == saved.shape:
                    live.copy_(saved, non_blocking=True)   # from page-locked memory: ordered on the stream


class RobustKbenchRuntime(TaskRuntime):
    def __init__(self, task: Task, direction: str):
        super().__init__(task, direction)
        self._module: Any = None
        self._model: Any = None
        self._state: ModelState | None = None
        self._inputs: list[Any] = []
        self._grad_outputs: list[Any] = []

    @property
    def reference_module(self) -> Any:
        if self._module is None:
            path = self.spec.reference_path
            self._module = import_file(path, module_name(f"kbench_rkb_{self.direction}", path))
        return self._module

    @property
    def autograd_function(self) -> Any:
        """The task's `AutogradFunction` (backward direction): its class attribute `backward_fn` is the kernel."""
        fn = getattr(self.reference_module, AUTOGRAD_CLASS, None)
        if fn is None:
            raise AttributeError(f"{self.spec.reference_path.name} defines no class {AUTOGRAD_CLASS}")
        return fn

    def setup(self, config: TaskConfig, seed: int, device: Any) -> None:
        import torch
        mod = self.reference_module
        # The last setup's tensors go first: a GiB input is not held twice while the next one is drawn.
        self._model, self._state, self._inputs, self._grad_outputs = None, None, [], []

        # Built under fixed seeds, on `device` where it is CUDA (on_device: on the CPU, then moved, where the
        # task's code needs the CPU). Inputs get seed + 1 so that they do not repeat the weights' draws
        # (x[0] == weight[0] would hide mix-ups).
        # Upstream (upstream_draws): both under the trial's seed, on the CPU, inputs first (sandbox/correct_*_fn.py).
        def build_model() -> Any:
            torch.manual_seed(seed)
            return mod.Model(**accepted_kwargs(mod.Model, config.model_kwargs))

        def build_inputs() -> list[Any]:
            torch.manual_seed(seed if self.upstream_draws else seed + 1)
            return list(mod.get_inputs(**accepted_kwargs(mod.get_inputs, config.input_kwargs)))

        if self.upstream_draws:
            raw = build_inputs()
            model = build_model()
        else:
            model = on_device(device, build_model)
            raw = on_device(device, build_inputs)
        wants_grad = [is_float_tensor(r) and r.requires_grad for r in raw]
        inputs = apply_init(raw, config.init, seed)
        del raw  # the init scheme's draws replace the task's: not both held
        inputs = [t.requires_grad_(True) if is_float_tensor(t) and g and not t.requires_grad else t
                  for t, g in zip(inputs, wants_grad)]
        # No eval(): upstream runs the model as constructed (training mode), and so does the reference here.
        self._model = model.to(device)
        self._state = ModelState(self._model)
        self._inputs = to_device(inputs, device)
        del inputs  # a CPU fallback's host copies
        if self.direction == "backward":
            self._grad_outputs = self._make_grad_outputs(seed, device)

    def pristine(self) -> list[Any]:
        return self._inputs

    def inputs(self) -> list[Any]:
        """Fresh leaf copies that keep each input's requires_grad (set by the task's get_inputs, as upstream)."""
        import torch
        return [t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
                for t in self._inputs]

    def _make_grad_outputs(self, seed: int, device: Any) -> list[Any]:
        import torch
        with torch.no_grad():
            outs = as_outputs(self._model(*self.inputs()))
        self._restore()
        if self.upstream_draws:   # upstream: set_seed(trial seed), then randn_like(output) beside the output
            torch.manual_seed(seed)
            return [torch.randn_like(o) for o in outs if is_float_tensor(o)]
        return seeded_normals([(o.shape, o.dtype) for o in outs if is_float_tensor(o)], device,
                              seed * GRAD_OUTPUT_SALT + 7)

    def _restore(self) -> None:
        if self._state is not None:
            self._state.restore()

    # --- forward -----------------------------------------------------------------------------------------

    def _forward(self, inputs: list[Any], fn: Callable[..., Any] | None) -> Outputs:
        """One model call between two restores: a training-mode BatchNorm's update of its running statistics does
        not outlive the call, so the call plan's arguments (which are the model's buffers) keep the values every
        call starts from, the candidate's and the reference's alike. An output that is a parameter or a buffer is
        copied before the restore."""
        import torch
        self._restore()
        with torch.no_grad():
            out = as_outputs(self._model(*inputs) if fn is None else self._model(*inputs, fn=fn))
        if self._state is not None:
            own = {t.untyped_storage().data_ptr() for t, _ in self._state.saved if t.numel()}
            out = tuple(o.clone() if isinstance(o, torch.Tensor) and o.numel() and
                        o.untyped_storage().data_ptr() in own else o for o in out)
        self._restore()
        return out

    # --- backward ----------------------------------------------------------------------------------------

    def gradient_targets(self, inputs: list[Any]) -> list[Any]:
        """What gradients are collected for: the inputs that require grad (get_inputs marks them, as upstream
        does), then every parameter of the model that requires grad, in `model.parameters()` order."""
        import torch
        return ([t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
                + [p for p in self._model.parameters() if p.requires_grad])

    def _gradients(self, inputs: list[Any], fn: Callable[..., Any]) -> Outputs:
        """Run `model(*inputs, fn=fn)` and backpropagate the fixed grad_output; one gradient per target."""
        import torch
        self._restore()
        wrt = self.gradient_targets(inputs)
        if not wrt:
            raise RuntimeError(f"{self.spec.reference_path.name}: no input requires grad and the model has no "
                               "parameters, so there is no gradient to check (get_inputs marks the inputs that "
                               "get one with requires_grad=True).")
        with torch.enable_grad():
            outs = [o for o in as_outputs(self._model(*inputs, fn=fn)) if is_float_tensor(o)]
            if not outs or not all(o.requires_grad for o in outs):
                raise RuntimeError(f"{self.spec.reference_path.name}: the forward output does not require grad, "
                                   "so there is no backward to check.")
            grads = torch.autograd.grad(outs, wrt, self._grad_outputs[:len(outs)], allow_unused=True)
        # A target the output does not depend on has a zero gradient; None would not compare.
        return tuple(torch.zeros_like(w) if g is None else g for g, w in zip(grads, wrt))

    def _with_backward_fn(self, kernel: Callable[..., Any], run: Callable[[], Any]) -> Any:
        """Run `run()` with `AutogradFunction.backward_fn = kernel`, restoring the attribute whatever happens."""
        return with_backward_fn(self.autograd_function, kernel, run)

    def _apply_gradients(self, inputs: list[Any], kernel: Callable[..., Any]) -> Outputs:
        """Gradients with the model run as `model(*inputs, fn=AutogradFunction.apply)` and `kernel` as backward_fn.
        A kernel never called is an error: the reference gradients would otherwise pass for any candidate."""
        calls = [0]

        def counted(*args: Any) -> Any:
            calls[0] += 1
            return as_tuple(kernel(*args))

        cls = self.autograd_function
        grads = self._with_backward_fn(counted, lambda: self._gradients(inputs, cls.apply))
        if not calls[0]:
            raise RuntimeError(f"{self.spec.reference_path.name}: the candidate's backward was never called; "
                               f"Model.forward must pass its inputs through fn (here {AUTOGRAD_CLASS}.apply).")
        return grads

    # --- the kernel's calls, for an evaluator that runs the candidate elsewhere ---------------------------------

    def kernel_calls(self, inputs: list[Any]) -> list[tuple]:
        """The argument tuples the candidate's entry point receives for these inputs, detached, in call order.

        forward: what `Model.forward` passes to `fn`. backward: what `AutogradFunction.backward` passes to
        `AutogradFunction.backward_fn` when the fixed grad_output is backpropagated (task-specific: for a linear
        layer `(grad_output, x, weights)`, for a max-pool `(ctx.saved_tensors, grad_output)`, nested tuples kept).
        Backpropagation stops at the first call, so a backward with several calls reports the first only."""
        captured: list[tuple] = []
        if self.direction == "forward":
            forward_fn = self.reference_module.forward_fn

            def capture(*args: Any) -> Any:
                captured.append(tuple(detached(a) for a in args))
                return forward_fn(*args)

            self._forward(inputs, capture)
            return captured

        captured = capture_calls(self.autograd_function,
                                 lambda: self._gradients(inputs, self.autograd_function.apply))
        if not captured:
            raise RuntimeError(f"{self.spec.reference_path.name}: {AUTOGRAD_CLASS}.backward_fn was never called")
        return captured

    def outputs_from_kernel(self, inputs: list[Any], results: list[Any]) -> Outputs:
        """This direction's result (the output, or the gradients) when the entry point's calls return `results`,
        in the order of `kernel_calls`: the judge's half of running a candidate in another process."""
        pending = list(results)

        def replay(*_args: Any) -> Any:
            if not pending:
                raise RuntimeError("the entry point was called more often than results were given")
            return as_tuple(pending.pop(0))

        if self.direction == "forward":
            return self._forward(inputs, replay)
        return self._apply_gradients(inputs, replay)

    def call_plan(self, inputs: list[Any]) -> CallPlan:
        calls = self.kernel_calls(inputs)
        if len(calls) != 1:
            raise RuntimeError(f"{self.spec.reference_path.name}: the candidate's entry point is called {len(calls)} "
                               "times per evaluation; the judge supports tasks that call it once")
        return CallPlan("fn", "forward" if self.direction == "forward" else "backward", calls[0])

    def compose(self, inputs: list[Any], outputs: list[Any]) -> Outputs:
        return self.outputs_from_kernel(inputs, [stub_fn(outputs)()])

    def freshable(self, tensors: list[Any]) -> list[bool]:
        """Forward: every floating-point argument. Backward: none: upstream's AutogradFunction passes what its
        forward saved (activations derived from the inputs), which cannot be varied one by one."""
        return super().freshable(tensors) if self.direction == "forward" else [False] * len(tensors)

    def fresh_reference(self, args: tuple) -> Outputs:
        import torch
        if self.direction != "forward":
            raise NotImplementedError("robust-kbench backward arguments are not given fresh values")
        with torch.no_grad():
            out = self.reference_module.forward_fn(*args)
        return self.outputs_from_kernel(self.inputs(), [out])

    # --- TaskRuntime ---------------------------------------------------------------------------------------

    def reference(self, inputs: list[Any]) -> Outputs:
        if self.direction == "forward":
            return self._forward(inputs, None)
        return self._gradients(inputs, self.reference_module.forward_fn)

    def candidate(self, module: Any, inputs: list[Any]) -> Outputs:
        if self.direction == "forward":
            return self._forward(inputs, module.forward)
        return self._apply_gradients(inputs, module.backward)

    # Timing. Forward: one model call. Backward: one backpropagation of the fixed grad_output through a graph built
    # once outside the timed region (retain_graph), as upstream times `out.backward(grad_out)`; the reference's
    # graph is plain autograd through forward_fn, the candidate's goes through AutogradFunction and its kernel.

    def _backward_callable(self, fn: Callable[..., Any], kernel: Callable[..., Any] | None = None
                           ) -> Callable[[], Any]:
        import torch
        inputs = self.inputs()
        wrt = self.gradient_targets(inputs)
        grad_outputs = self._grad_outputs

        def build() -> list[Any]:
            with torch.enable_grad():
                return [o for o in as_outputs(self._model(*inputs, fn=fn)) if is_float_tensor(o)]

        outs = build()

        def run() -> Any:
            return torch.autograd.grad(outs, wrt, grad_outputs[:len(outs)], retain_graph=True, allow_unused=True)

        if kernel is None:
            return run

        def with_kernel() -> Any:
            return self._with_backward_fn(kernel, run)
        return with_kernel

    def eager_callable(self) -> Callable[[], Any]:
        """Forward: forward_fn on the arguments Model.forward gives fn (what the candidate replaces, and what the
        runner times it on). Backward: one backpropagation through plain autograd."""
        if self.direction == "forward":
            return no_grad_call(self.reference_module.forward_fn, self.kernel_calls(self.inputs())[0])
        return self._backward_callable(self.reference_module.forward_fn)

    def candidate_callable(self, module: Any) -> Callable[[], Any]:
        if self.direction == "forward":
            return no_grad_call(lambda *a: self._model(*a, fn=module.forward), self.inputs())

        def kernel(*args: Any) -> Any:
            return as_tuple(module.backward(*args))
        return self._backward_callable(self.autograd_function.apply, kernel)

    def compiled_callable(self) -> Callable[[], Any] | None:
        import torch
        if self.direction == "forward":
            return try_compile(self.reference_module.forward_fn, self.kernel_calls(self.inputs())[0])
        try:
            call = self._backward_callable(torch.compile(self.reference_module.forward_fn))
            call()
        except Exception:  # noqa: BLE001 - as try_compile: no compiled baseline where it cannot compile
            return None
        return call
