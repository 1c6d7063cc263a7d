"""Export a Triton candidate (kernel.py + the binding.py kbench generates, engine/tasks/glue/triton.py) as a package.

The op is a `torch.library.custom_op` (`NAME::forward`) whose CUDA implementation is the generated binding calling
the candidate's launcher, and whose fake implementation is the same binding text in its fake mode (the checks and
allocations, on any device, no launch): torch.compile and torch.export see the op's outputs without running it.
custom_op rather than triton_op: the launcher calls its kernels directly, as the runner ran it, so nothing of the
candidate is rewritten for export (triton_op would need each launch wrapped in wrap_triton to be traced into).

The package is pure Python: Triton compiles the kernel at its first launch, for the GPU that runs it, so it
installs without a compiler or a GPU. It pins the torch and Triton kbench ran (Triton's code generation follows
its version). kernel.py ships byte for byte; binding.py imports it as a sibling module of the package.
"""

from __future__ import annotations

import importlib.metadata
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from engine.export import names, readme_parts, targets
from engine.export.errors import ExportError
from engine.export.kernel_source import KernelSource
from engine.export.render import render
from engine.tasks.glue.abi import GlueError, LauncherAbi, launcher_abi
from engine.tasks.glue.triton import binding_py_text
from engine.tasks.model import Task

VERSION = "0.1.0"
_PY_TYPES = {"float": "float", "int": "int", "bool": "bool"}


@dataclass
class TritonPlan:
    name: str
    task: Task
    reference_name: str
    reference_text: str
    forward: KernelSource                # the Triton candidate (kernel.py, binding.py)
    abi: LauncherAbi
    backward: None = None                # the forward op only (see triton_plan)
    forced: bool = False
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    archs: tuple[str, ...] = ()          # unused: Triton compiles for the GPU it runs on

    @property
    def class_name(self) -> str:
        return names.class_name(self.name)


def triton_plan(name: str, task: Task, reference_name: str, reference_text: str, kernel: KernelSource) -> TritonPlan:
    if task.format != "native":
        raise ExportError(f"task {task.name!r} is a {task.format} task; a Triton candidate exports with a native "
                          "task's signature (its launcher's parameters).")
    try:
        abi = launcher_abi(task, "forward")
    except GlueError as exc:
        raise ExportError(f"task {task.name!r}: {exc}") from None
    plan = TritonPlan(name, task, reference_name, reference_text, kernel, abi)
    if "backward" in task.directions:
        plan.notes.append("Exported as the forward op only: a Triton backward kernel is not exported yet, so the op "
                          "has no autograd formula.")
    return plan


def triton_version() -> str:
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        raise ExportError("triton is not installed here; kbench export records the Triton the kernel was "
                          "verified with, so it must run where kbench runs.") from None


def _param(p: Any) -> str:
    if p.kind == "tensor":
        return f"{p.cname}: Optional[torch.Tensor]" if p.optional else f"{p.cname}: torch.Tensor"
    return f"{p.cname}: {_PY_TYPES[p.kind]}"


def package_files(plan: TritonPlan) -> dict[str, str]:
    """Every file of the Triton package, relative path -> text."""
    ns, abi = plan.name, plan.abi
    cand = plan.forward.candidate
    params = ", ".join(_param(p) for p in abi.inputs)
    args = ", ".join(p.cname for p in abi.inputs)
    desc = (plan.task.description or f"task {plan.task.name}").strip().splitlines()[0]
    desc = desc.replace("\\", "/").replace('"""', "'''")
    warnings = ("\n> **WARNING: exported with --force.** " + " ".join(plan.warnings)
                + " Treat this kernel as unverified.\n") if plan.warnings else ""
    values = {"namespace": ns, "version": VERSION, "description": json.dumps(desc), "description_line": desc,
              "task_name": plan.task.name, "dtype": plan.task.dtype, "class_name": plan.class_name,
              "params": params, "args": args, "signature": abi.signature,
              "returns": "list[torch.Tensor]" if abi.returns_list else "torch.Tensor",
              "torch_version": targets.torch_version(), "triton_version": triton_version(), "warnings": warnings,
              "notes": "".join(f"- {n}\n" for n in plan.notes), "provenance": readme_parts.provenance(plan),
              "verdicts": readme_parts.verdicts(plan), "measurements": readme_parts.measurements(plan)}
    init = render("triton/__init__.py", values)
    if "Optional[" in params:
        init = init.replace("import torch\n", "from typing import Optional\n\nimport torch\n", 1)
    binding = cand.files.get("binding.py") or binding_py_text(abi)
    return {
        "pyproject.toml": render("triton/pyproject.toml", values),
        "README.md": render("triton/README.md", values),
        f"src/{ns}/__init__.py": init,
        f"src/{ns}/kernel.py": cand.files["kernel.py"],
        f"src/{ns}/binding.py": binding.replace(f"from kernel import {abi.launcher}",
                                                f"from .kernel import {abi.launcher}", 1),
        f"src/{ns}/fake.py": binding_py_text(abi, fake=True),
        f"src/{ns}/reference.py": plan.reference_text,
        f"src/{ns}/export.json": json.dumps(export_json(plan), indent=2, default=str) + "\n",
        "tests/conftest.py": render("tests/conftest.py", values),
        f"tests/test_{ns}_cpu.py": render("triton/test_cpu.py", values),
        f"tests/test_{ns}.py": render("triton/test_gpu.py", values),
    }


def export_json(plan: TritonPlan) -> dict[str, Any]:
    task = plan.task
    spec = task.spec("forward")
    return {
        "schema": 1, "namespace": plan.name, "task": task.name, "task_format": task.format, "kind": "triton",
        "description": task.description, "dtype": task.dtype, "signature": spec.signature,
        "tolerance": {"forward": {"atol": spec.tolerance.atol, "rtol": spec.tolerance.rtol,
                                  "max_mismatch_fraction": spec.max_mismatch_fraction}},
        "configs": [{"name": c.name, "model_kwargs": c.model_kwargs, "input_kwargs": c.input_kwargs, "seed": c.seed}
                    for c in task.configs],
        "kernels": {"forward": readme_parts.kernel_json(plan.forward)},
        "forced": plan.forced, "warnings": plan.warnings, "notes": plan.notes,
        "verified_with_torch": targets.torch_version(), "verified_with_triton": triton_version(),
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
