"""Runtime for KernelBench problems: reference `Model(*get_init_inputs())`, candidate `ModelNew(...)`.

ModelNew is built under the same seed as Model and then given Model's weights (state_dict, matching keys
and shapes only), so a candidate cannot fail, or pass, because its parameters were drawn differently.
"""

from __future__ import annotations

from typing import Any, Callable

from engine.harness.runtimes.base import CallPlan, Outputs, TaskRuntime, as_outputs, import_file
from engine.harness.runtimes.robust_kbench import module_name, no_grad_call, to_device, try_compile
from engine.tasks.inits import apply_init
from engine.tasks.model import Task, TaskConfig


class KernelBenchRuntime(TaskRuntime):
    def __init__(self, task: Task, direction: str):
        super().__init__(task, direction)  # a KernelBench task has only "forward": spec() rejects the rest
        self._module: Any = None
        self._model: Any = None
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

    def setup(self, config: TaskConfig, seed: int, device: Any) -> None:
        import torch
        mod = self.reference_module
        torch.manual_seed(seed)
        self._init_inputs = list(mod.get_init_inputs())
        torch.manual_seed(seed)
        model = mod.Model(*self._init_inputs)
        torch.manual_seed(seed + 1)  # not the weights' draws again (as the other runtimes do)
        inputs = apply_init(list(mod.get_inputs()), config.init, seed)
        self._model = model.to(device)
        self._inputs = to_device(inputs, device)
        self._seed, self._device = seed, device
        self._candidate_models.clear()  # new weights: a ModelNew built for the last setup is stale

    def pristine(self) -> list[Any]:
        return self._inputs

    shares_model_across_variants = True

    def reseed_inputs(self, config: TaskConfig, seed: int, device: Any) -> None:
        import torch
        torch.manual_seed(seed + 1)
        self._inputs = to_device(apply_init(list(self.reference_module.get_inputs()), config.init, seed), device)

    def call_plan(self, inputs: list[Any]) -> CallPlan:
        state = {k: v.detach() for k, v in self._model.state_dict().items()}
        return CallPlan("modelnew", "ModelNew", tuple(inputs), tuple(self._init_inputs), state, self._seed)

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
        new = new.to(self._device)
        self._candidate_models[id(module)] = (module, new)
        return new

    def reference(self, inputs: list[Any]) -> Outputs:
        import torch
        with torch.no_grad():
            return as_outputs(self._model(*inputs))

    def candidate(self, module: Any, inputs: list[Any]) -> Outputs:
        import torch
        model = self.candidate_model(module)
        with torch.no_grad():
            return as_outputs(model(*inputs))

    def candidate_callable(self, module: Any) -> Callable[[], Any]:
        self.candidate_model(module)  # build outside the timed region
        return super().candidate_callable(module)

    def eager_callable(self) -> Callable[[], Any]:
        """The model called exactly as the runner calls ModelNew (under no_grad, nothing around it)."""
        return no_grad_call(self._model, self.inputs())

    def compiled_callable(self) -> Callable[[], Any] | None:
        return try_compile(self._model, self.inputs())
