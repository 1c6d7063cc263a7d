"""The interface the judge drives; one implementation per task format.

Runs only inside the judge (engine.pipeline.judge), which is trusted and never runs candidate code: a runtime
builds a config's model and inputs from a seed, computes the reference, says how the candidate is called
(`call_plan`: the exact arguments the runner passes it) and turns the candidate's outputs back into what is
compared with the reference (`compose`). `candidate()` and `candidate_callable()` call a candidate module in
this process: only tests and tools that run trusted code use them.

Lazy imports: torch, inside the methods: the judge imports the runtimes before it spawns its runner, so that both
processes import torch at the same time (engine/pipeline/judge/evaluation.py).
"""

from __future__ import annotations

import importlib.util
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

from engine.tasks.model import Task, TaskConfig

Outputs = tuple  # tuple of tensors (or scalars); compared element by element
T = TypeVar("T")


def import_file(path: Path, module_name: str) -> Any:
    """Import a Python file under a unique module name (reference modules and KernelBench candidates)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def draw_device(device: Any) -> Any:
    """Where a task's own model and input code draws for a setup on `device`: `device` itself where it is a CUDA
    device, else None (no device context: the CPU, or whatever context the caller has entered, as the meta one
    of engine.integrity.check_task's size guard)."""
    import torch
    dev = torch.device(device)
    return dev if dev.type == "cuda" else None


def on_device(device: Any, step: Callable[[], T]) -> T:
    """`step()` (a setup step: it seeds the global generators, then calls the task's own code) run under
    `with torch.device(d)` for d = draw_device(device), so the task's factory calls without a device (torch.randn,
    torch.empty(...).normal_(), nn.Linear's parameters) allocate and draw there rather than on the CPU and a copy.
    torch.manual_seed seeds the CUDA generators too, so the draws are as deterministic per seed as on the CPU
    (but not the same values: each device has its own generator).

    Task code that raises under the context (it goes through numpy, or draws with a CPU torch.Generator) runs
    again without it, on the CPU exactly as before the context existed; the caller moves the result as ever.
    An error of the task's own shows up there, from the CPU run."""
    import torch
    dev = draw_device(device)
    if dev is None:
        return step()
    try:
        with torch.device(dev):
            return step()
    except Exception:  # noqa: BLE001 - the CPU run below raises it again if it is not the context's doing
        pass
    # outside the handler: the failed attempt's frames, and the device memory they hold, are gone by now
    return step()


def seeded_normals(specs: list[tuple[Any, Any]], device: Any, seed: int) -> list[Any]:
    """Standard normal draws, one tensor per (shape, dtype) of `specs`, in order from one generator seeded with
    `seed`: a generator on `device` where it is CUDA (no host draw and copy), else on the CPU as ever, the draws
    then moved to `device`."""
    import torch
    dev = draw_device(device)
    if dev is not None:
        gen = torch.Generator(device=dev).manual_seed(seed)
        return [torch.randn(shape, generator=gen, dtype=dtype, device=dev) for shape, dtype in specs]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return [torch.randn(shape, generator=gen, dtype=dtype).to(device) for shape, dtype in specs]


def as_outputs(value: Any) -> Outputs:
    if isinstance(value, (tuple, list)):
        return tuple(value)
    return (value,)


@dataclass(frozen=True)
class CallPlan:
    """How the runner calls the candidate for one setup.

    kind "fn": `module.<entry>(*args)`. kind "modelnew": `module.ModelNew(*model_init)`, seeded with
    `model_seed`, given the reference model's weights (`model_state`, matching names and shapes), called
    on `args`."""
    kind: str
    entry: str
    args: tuple
    model_init: tuple = ()
    model_state: dict[str, Any] = field(default_factory=dict)
    model_seed: int = 0
    model_dtype: str | None = None     # ModelNew is cast to it (a KernelBench problem run in fp16 or bf16)
    # a reference that draws random numbers (a dropout in training mode): the seed torch's generators get right
    # before every call, the reference's and the candidate's alike, as KernelBench's eval seeds both models
    call_seed: int | None = None


class TaskRuntime(ABC):
    """Builds the reference model and inputs for a config and calls reference or candidate on them.

    `setup` is called once per (config, trial) with a seed; `inputs()` returns fresh clones each time, so a
    candidate that mutates its inputs cannot affect the reference run, and `pristine()` exposes the
    untouched originals for the mutation check.
    """

    def __init__(self, task: Task, direction: str):
        self.task = task
        self.direction = direction
        self.spec = task.spec(direction)

    @abstractmethod
    def setup(self, config: TaskConfig, seed: int, device: Any) -> None:
        """Build the model (seeded) and inputs (seeded, config's init scheme applied) on `device`, drawn there
        where it is CUDA (`on_device`)."""

    @abstractmethod
    def pristine(self) -> list[Any]:
        """The original inputs of the current setup (never handed to reference or candidate)."""

    def inputs(self) -> list[Any]:
        import torch
        return [t.clone() if isinstance(t, torch.Tensor) else t for t in self.pristine()]

    @abstractmethod
    def reference(self, inputs: list[Any]) -> Outputs:
        """The reference result for this direction: the output(s), or the gradients for backward."""

    @abstractmethod
    def candidate(self, module: Any, inputs: list[Any]) -> Outputs:
        """The candidate's result for this direction, from its loaded module."""

    def eager_callable(self) -> Callable[[], Any]:
        """A zero-arg callable timing the eager reference on the current setup's inputs."""
        inputs = self.inputs()
        return lambda: self.reference(inputs)

    def compiled_callable(self) -> Callable[[], Any] | None:
        """A zero-arg callable timing the torch.compile'd reference, or None where it does not apply."""
        return None

    def candidate_callable(self, module: Any) -> Callable[[], Any]:
        inputs = self.inputs()
        return lambda: self.candidate(module, inputs)

    # -- what the judge needs ------------------------------------------------------------------------------
    @abstractmethod
    def call_plan(self, inputs: list[Any]) -> CallPlan:
        """How the candidate is called on these inputs of the current setup."""

    def compose(self, inputs: list[Any], outputs: list[Any]) -> Outputs:
        """The candidate's outputs (as the runner returned them for `call_plan(inputs)`) turned into what is
        compared with `reference(inputs)`. Identity unless the task wraps the candidate's result."""
        return tuple(outputs)

    # -- fresh inputs (engine/pipeline/judge/fresh.py) ----------------------------------------------------------------
    def freshable(self, tensors: list[Any]) -> list[bool]:
        """Which of a call's argument tensors (in the wire's order) may be given fresh values: every
        floating-point one, unless a format's arguments are derived from one another."""
        import torch
        return [isinstance(t, torch.Tensor) and t.is_floating_point() for t in tensors]

    @abstractmethod
    def fresh_reference(self, args: tuple) -> Outputs:
        """The reference, as `reference` gives it, for exactly these call arguments (the plan's, some given fresh
        values), under the current setup."""

    # Whether `compose` reads its inputs (a task's Model that wraps fn's result): where it does not, the judge
    # composes without fetching the variant's inputs back to the GPU (engine/pipeline/judge/parking.py).
    composes_with_inputs = True

    # Variants of a config share the reference model (KernelBench: the weights come from the config's seed
    # and ModelNew is built once) or redraw everything (native, robust-kbench: weights are arguments).
    shares_model_across_variants = False

    # Draw as the task's benchmark draws (the upstream mode, engine/pipeline/eval_mode.py): the model and the inputs
    # under the trial's seed itself, on the CPU and then moved, where kbench draws on the GPU and gives the inputs
    # seed + 1. Only the imported formats' runtimes (robust-kbench, KernelBench) know how; the judge sets it.
    upstream_draws = False

    def reseed_inputs(self, config: TaskConfig, seed: int, device: Any) -> None:
        """New inputs under `seed`, same model (only where shares_model_across_variants)."""
        raise NotImplementedError

    def save_state(self) -> dict[str, Any]:
        """The current setup (model, inputs...), to come back to after setting up other variants."""
        return dict(self.__dict__)

    def restore_state(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def stub_fn(outputs: list[Any]) -> Callable[..., Any]:
    """A stand-in for the candidate's function that returns what the candidate returned."""
    value = outputs[0] if len(outputs) == 1 else tuple(outputs)
    return lambda *args: value
