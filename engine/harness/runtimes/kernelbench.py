"""Runtime for KernelBench problems: reference `Model(*get_init_inputs())`, candidate `ModelNew(...)`.

As KernelBench's eval: the problem's own `get_inputs()` (never rewritten), floating-point tensors and the models
cast to the task's precision, the models left in training mode, both called under `torch.no_grad()`.
`get_inputs()` runs under `with torch.device(device)` where the device is CUDA, so its factory calls without a
device (torch.randn...) draw on the GPU from the CUDA generator seeded by torch.manual_seed, instead of on the CPU
and a copy; its code is the same, only where it draws. A `get_inputs` that raises there (it goes through numpy, say)
runs again on the CPU, as it always did, and its tensors are moved (base.on_device).
ModelNew is built under the same seed as Model and then given Model's weights (state_dict, matching keys and
shapes only), so a candidate cannot fail, or pass, because its parameters were drawn differently. ModelNew is built
on the CPU (runner.py, `candidate_model`), so Model and `get_init_inputs()` are too, then moved: a parameter that
ModelNew names differently (no state_dict key to match) gets Model's values from the shared seed only where both
draw on the same device.
A config's `input_kwargs` are module constants (kbench's odd-size variant) set while `get_inputs` runs.

Lazy imports: torch, inside the methods: the judge imports the runtimes before it spawns its runner, so that both
processes import torch at the same time (engine/pipeline/judge/evaluation.py).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

from engine.harness.runtimes.base import CallPlan, Outputs, TaskRuntime, as_outputs, import_file, on_device
from engine.harness.runtimes.robust_kbench import ModelState, module_name, to_device, try_compile
from engine.tasks.model import Task, TaskConfig

UPSTREAM_MODEL_SEED = 42   # KernelBench's eval: seed_num, set before get_init_inputs, Model and ModelNew


def cast_floats(values: list[Any], dtype: Any) -> list[Any]:
    """Floating-point tensors to `dtype`; integer tensors (indices, targets) and other values unchanged.
    (KernelBench casts every tensor; an integer target cast to fp16 would no longer index anything.)"""
    import torch
    return [v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values]


@contextmanager
def module_constants(module: Any, values: dict[str, Any]) -> Iterator[None]:
    """Set module-level constants for the duration (get_inputs reads them as globals); put the old ones back."""
    old = {k: getattr(module, k) for k in values}
    for k, v in values.items():
        setattr(module, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(module, k, v)


class KernelBenchRuntime(TaskRuntime):
    def __init__(self, task: Task, direction: str):
        super().__init__(task, direction)  # a KernelBench task has only "forward": spec() rejects the rest
        self._module: Any = None
        self._model: Any = None
        self._state: ModelState | None = None
        self._inputs: list[Any] = []
        self._init_inputs: list[Any] = []
        self._seed = 0
        self._device: Any = None
        self._candidate_models: dict[int, tuple[Any, Any]] = {}  # id(module) -> (module, built ModelNew)

    @property
    def reference_module(self) -> Any:
        if self._module is None:
            path = self.spec.reference_path
            self._module = import_file(path, module_name("kbench_kb", path))
        return self._module

    @property
    def dtype(self) -> Any:
        import torch
        return getattr(torch, self.task.dtype)

    def setup(self, config: TaskConfig, seed: int, device: Any) -> None:
        import torch
        mod = self.reference_module
        self._model, self._state, self._inputs = None, None, []  # not held while the next setup's are built
        # upstream (upstream_draws): the weights always under KernelBench's seed_num, the inputs under the trial's
        model_seed = UPSTREAM_MODEL_SEED if self.upstream_draws else seed
        torch.manual_seed(model_seed)
        self._init_inputs = cast_floats(list(mod.get_init_inputs()), self.dtype)
        torch.manual_seed(model_seed)
        model = mod.Model(*self._init_inputs)
        self._model = model.to(device=device, dtype=self.dtype)
        self._state = ModelState(self._model)
        self._inputs = self._draw_inputs(config, seed, device)
        self._seed, self._device = model_seed, device
        self._candidate_models.clear()  # new weights: a ModelNew built for the last setup is stale

    def pristine(self) -> list[Any]:
        return self._inputs

    # Variants of a config share the model (its weights come from the config's seed; the runner builds ModelNew
    # once per config) and differ in the problem's inputs only.
    shares_model_across_variants = True
    composes_with_inputs = False   # ModelNew returns what Model returns

    def reseed_inputs(self, config: TaskConfig, seed: int, device: Any) -> None:
        self._inputs = []  # the last variant's inputs are not held while the next ones are drawn
        self._inputs = self._draw_inputs(config, seed, device)

    def _draw_inputs(self, config: TaskConfig, seed: int, device: Any) -> list[Any]:
        """The problem's get_inputs() under seed + 1 (not the weights' draws again, as the other runtimes do), on
        `device` where it is CUDA (on the CPU where its code needs it), cast and moved to `device`."""
        import torch
        mod = self.reference_module

        def draw() -> list[Any]:
            torch.manual_seed(seed if self.upstream_draws else seed + 1)
            with module_constants(mod, config.input_kwargs):
                return list(mod.get_inputs())
        drawn = draw() if self.upstream_draws else on_device(device, draw)   # upstream draws on the CPU
        return to_device(cast_floats(drawn, self.dtype), device)

    def call_plan(self, inputs: list[Any]) -> CallPlan:
        if self._state is not None:
            self._state.restore()
        state = {k: v.detach() for k, v in self._model.state_dict().items()}
        return CallPlan("modelnew", "ModelNew", tuple(inputs), tuple(self._init_inputs), state, self._seed,
                        str(self.dtype).removeprefix("torch."))

    def candidate_model(self, module: Any) -> Any:
        """ModelNew for the current setup, built once per (setup, module) so timing loops do not rebuild it."""
        cached = self._candidate_models.get(id(module))
        if cached is not None and cached[0] is module:
            return cached[1]
        import torch
        if not hasattr(module, "ModelNew"):
            raise AttributeError("the candidate module defines no class ModelNew")
        torch.manual_seed(self._seed)
        new = module.ModelNew(*self._init_inputs)
        own = new.state_dict()
        # strict=False alone still raises on a shape mismatch; a key ModelNew shapes differently is its own.
        shared = {k: v for k, v in self._model.state_dict().items() if k in own and own[k].shape == v.shape}
        new.load_state_dict(shared, strict=False)
        new = new.to(device=self._device, dtype=self.dtype)
        self._candidate_models[id(module)] = (module, new)
        return new

    def reference(self, inputs: list[Any]) -> Outputs:
        import torch
        if self._state is not None:
            self._state.restore()  # a candidate that wrote into a shared weight cannot steer the reference
        with torch.no_grad():
            return as_outputs(self._model(*inputs))

    def fresh_reference(self, args: tuple) -> Outputs:
        return self.reference(list(args))   # the call's arguments are the problem's inputs

    def candidate(self, module: Any, inputs: list[Any]) -> Outputs:
        import torch
        model = self.candidate_model(module)
        with torch.no_grad():
            return as_outputs(model(*inputs))

    def eager_callable(self) -> Callable[[], Any]:
        import torch
        inputs = self.inputs()

        def run() -> Any:
            with torch.no_grad():
                return self._model(*inputs)
        return run

    def candidate_callable(self, module: Any) -> Callable[[], Any]:
        self.candidate_model(module)  # build outside the timed region
        return super().candidate_callable(module)

    def compiled_callable(self) -> Callable[[], Any] | None:
        return try_compile(self._model, self.inputs())
