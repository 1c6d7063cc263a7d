"""Write an ExportPlan as a package shaped like pytorch/extension-cpp (docs/formats.md, "Export").

```
<out>/pyproject.toml  setup.py  MANIFEST.in  README.md
<out>/csrc/kbench_export.h
<out>/csrc/forward/...            the forward candidate's files, verbatim
<out>/csrc/forward_op.cpp|.cu     TORCH_LIBRARY def + CUDA impl, #includes the candidate's binding
<out>/csrc/backward/..., backward_op.cpp|.cu   (when a backward kernel is exported)
<out>/src/<name>/__init__.py ops.py modules.py reference.py _inits.py export.json
<out>/tests/conftest.py  test_<name>_cpu.py  test_<name>.py (gpu)
```
The Python package sits under src/ so that `python -m pytest tests`, run in the package folder, imports the
installed (built) package and not the source folder, which has no compiled extension. What setup.py and the README
say about building (CUDA, GPUs, torch, CUTLASS) is engine/export/targets.py's; the op's dtype checks,
engine/export/dtypes.py's. A KernelBench ModelNew's package is engine/export/kernelbench.py's, a Triton
candidate's engine/export/triton_package.py's.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from engine.export import kernelbench, readme_parts, targets, triton_package
from engine.export.dtypes import DtypeCheck, dtype_checks
from engine.export.errors import ExportError
from engine.export.kernelbench import KernelBenchPlan
from engine.export.triton_package import TritonPlan
from engine.export.plan import AnyPlan, ExportPlan, KernelSource
from engine.export.render import render
from engine.tasks import inits

VERSION = "0.1.0"
MODULES = {"forward": "_C", "backward": "_C_backward"}
# A native kernel.cu is CUDA only (no torch headers): kbench compiles it without torch's half/bfloat16
# operator restrictions, and so does the export. A robust-kbench .cu includes torch, so it keeps them.
NATIVE_NVCC_FLAGS = ["-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                     "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__"]
MARKER = "csrc/kbench_export.h"


def prepare_out(out: Path, overwrite: bool) -> None:
    """Refuse a non-empty folder, except a previous export when `overwrite` (which is then replaced)."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out}: exists and is not a folder.")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ExportError(f"{out}: the folder is not empty; choose another --out, or pass --overwrite to "
                              "replace a previous export there.")
        if not (out / MARKER).is_file():
            raise ExportError(f"{out}: not a previous kbench export (no {MARKER}); refusing to delete it.")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def write_package(plan: AnyPlan, out: str | Path, overwrite: bool = False) -> list[Path]:
    out = Path(out)
    prepare_out(out, overwrite)
    files = package_files(plan)
    written = []
    for rel, text in files.items():
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
        written.append(dest)
    return written


# ------------------------------------------------------------------------------------------- files


def package_files(plan: AnyPlan) -> dict[str, str]:
    """Every file of the package, relative path -> text (a KernelBench ModelNew's: engine/export/kernelbench.py)."""
    if isinstance(plan, KernelBenchPlan):
        return kernelbench.package_files(plan)
    if isinstance(plan, TritonPlan):
        return triton_package.package_files(plan)
    ns = plan.name
    kernels = [k for k in (plan.forward, plan.backward) if k is not None]
    files: dict[str, str] = {}
    extensions = []
    for k in kernels:
        for rel, text in k.candidate.files.items():
            _check_rel(rel)
            files[f"csrc/{k.direction}/{rel}"] = text
        shim = f"csrc/{k.direction}_op.{'cpp' if k.candidate.format == 'native' else 'cu'}"
        files[shim] = _shim(plan, k)
        sources = [shim]
        if k.candidate.format == "native":
            sources.append(f"csrc/{k.direction}/kernel.cu")
        extensions.append((MODULES[k.direction], sources, [],
                           NATIVE_NVCC_FLAGS if k.candidate.format == "native" else [], []))
    files["csrc/kbench_export.h"] = render("csrc/kbench_export.h", {})
    values = _values(plan, extensions)
    files["pyproject.toml"] = render("pyproject.toml", values)
    files["setup.py"] = render("setup.py", values)
    files["MANIFEST.in"] = render("MANIFEST.in", values)
    files["README.md"] = render("README.md", values)
    pkg = f"src/{ns}"
    files[f"{pkg}/__init__.py"] = render("package/__init__.py", values)
    files[f"{pkg}/ops.py"] = render("package/ops.py", values)
    files[f"{pkg}/modules.py"] = render("package/modules.py", values)
    files[f"{pkg}/reference.py"] = plan.reference_text
    files[f"{pkg}/_inits.py"] = Path(inits.__file__).read_text()
    files[f"{pkg}/export.json"] = json.dumps(export_json(plan), indent=2, default=str) + "\n"
    files["tests/conftest.py"] = render("tests/conftest.py", values)
    files[f"tests/test_{ns}_cpu.py"] = render("tests/test_package_cpu.py", values)
    files[f"tests/test_{ns}.py"] = render("tests/test_package.py", values)
    return files


def _check_rel(rel: str) -> None:
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ExportError(f"candidate file {rel!r}: not a safe relative path.")


def _shim(plan: ExportPlan, k: KernelSource) -> str:
    schema = plan.forward_schema if k.direction == "forward" else plan.backward_schema
    assert schema is not None
    cpp = k.entry.params
    call = []
    for i, a in enumerate(schema.args):
        if a.optional and a.kind == "Tensor" and cpp is not None and "optional" not in cpp[i][0]:
            call.append(f"kbench_export::or_undefined({a.name})")
        elif a.is_list and cpp is not None and (m := re.search(r"vector\s*<\s*([\w:]+)\s*>", cpp[i][0])):
            call.append(f"std::vector<{m.group(1)}>({a.name}.begin(), {a.name}.end())")  # the binding's element type
        else:
            call.append(a.name)
    if k.direction == "forward":
        defs = [plan.forward_schema] + ([plan.backward_schema] if plan.backward_schema else [])
        block = (f"TORCH_LIBRARY({plan.name}, m) {{\n"
                 + "".join(f"    m.def(\"{s.text}\");\n" for s in defs if s is not None) + "}\n\n")
    else:
        block = ""
    block += (f"TORCH_LIBRARY_IMPL({plan.name}, CUDA, m) {{\n"
              f"    m.impl(\"{schema.op}\", TORCH_FN(kbench_{schema.op}_op));\n}}")
    return render("csrc/op_shim.cpp", {
        "direction": k.direction, "origin": k.origin, "namespace": plan.name, "op": schema.op,
        "binding_file": k.binding_file, "source_hash": k.candidate.source_hash, "entry": k.entry.function,
        "wrapper_return": "std::vector<at::Tensor>" if schema.returns_list else "at::Tensor",
        "wrapper_params": ", ".join(f"{a.cpp_type} {a.name}" for a in schema.args),
        "convert": "list" if schema.returns_list else "one", "call_args": ", ".join(call),
        "library_block": block, "module": MODULES[k.direction]})


# ------------------------------------------------------------------------------------------ values


def _values(plan: ExportPlan, extensions: list) -> dict[str, str]:
    ns, task = plan.name, plan.task
    desc = (task.description or f"kbench task {task.name}").strip().splitlines()[0]
    desc = desc.replace("\\", "/").replace('"""', "'''")  # it goes into a docstring
    has_bwd = plan.backward is not None
    model_init = _model_init(plan)
    rows = [f"| `torch.ops.{ns}.{s.op}` | `{s.text}` |" for s in (plan.forward_schema, plan.backward_schema) if s]
    csrc = []
    for k in (plan.forward, plan.backward):
        if k is None:
            continue
        ext = "cpp" if k.candidate.format == "native" else "cu"
        csrc.append(f"csrc/{k.direction}/".ljust(30) + f"the {k.direction} candidate's files, verbatim")
        csrc.append(f"csrc/{k.direction}_op.{ext}".ljust(30)
                    + ("TORCH_LIBRARY op + CUDA impl" if k.direction == "forward" else "CUDA impl of backward"))
    warnings = ""
    if plan.warnings:
        warnings = ("\n> **WARNING: exported with --force.** "
                    + " ".join(plan.warnings)
                    + " Treat this kernel as unverified.\n")
    notes = "".join(f"- {n}\n" for n in plan.notes)
    autograd = ("- `register_autograd` wires the backward kernel in: `y.backward()` runs "
                f"`torch.ops.{ns}.backward` and returns one gradient per floating-point tensor argument"
                + (" (no_grad arguments excluded)" if plan.backward_schema and _no_grad(plan) else "") + "."
                + (_convention_line(plan) if plan.backward_call is not None else "")
                if has_bwd else "- No backward kernel was exported: the op's autograd formula raises a RuntimeError "
                "that says so, in eager mode and under torch.compile alike, instead of returning no gradients.")
    return {
        "namespace": ns, "version": VERSION, "description": repr(desc), "description_line": desc,
        "task_name": task.name, "class_name": plan.class_name, "model_init": model_init,
        "model_signature": _model_signature(plan.reference_text),
        "extensions": targets.py_list(extensions),
        "extensions_doc": ("Each kernel direction is its own extension module, so the two candidates' sources never "
                           "share a link unit\n(two kernels may well define functions of the same name)."),
        "origin": plan.forward.origin,
        "forward_module": MODULES["forward"],
        "backward_import": (f"from . import {MODULES['backward']}  # noqa: F401  registers the backward kernel"
                            if has_bwd else ""),
        "backward_name": ", backward" if has_bwd else "",
        "backward_all": ', "backward"' if has_bwd else "",
        "exported_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "warnings": warnings, "op_rows": "\n".join(rows), "autograd_line": autograd, "notes": notes,
        "reference_name": plan.reference_name, "provenance": readme_parts.provenance(plan),
        "verdicts": readme_parts.verdicts(plan), "measurements": readme_parts.measurements(plan),
        "csrc_listing": "\n".join(csrc),
        "autograd_word": ", register_autograd" if has_bwd else "",
        "dtype_line": _dtype_line(plan), **targets.build_values(plan.archs, _files(plan)),
    }


def _files(plan: ExportPlan) -> dict[str, str]:
    """The kernels' sources, both directions (what build_values looks for CUTLASS includes in)."""
    kernels = [k for k in (plan.forward, plan.backward) if k is not None]
    return {rel: text for k in kernels for rel, text in k.candidate.files.items()}


def _checks(k: KernelSource | None) -> list[DtypeCheck]:
    """The dtype checks of a kernel's binding (engine/export/dtypes.py)."""
    return dtype_checks(k.candidate.files[k.binding_file], k.entry) if k is not None else []


def _dtype_line(plan: ExportPlan) -> str:
    parts = []
    for k, schema in ((plan.forward, plan.forward_schema), (plan.backward, plan.backward_schema)):
        if k is None or schema is None:
            continue
        checks = _checks(k)
        if not checks:
            parts.append(f"`{schema.op}`: its binding checks no dtype kbench can read, so the fake checks none")
            continue
        by_arg: dict[str, list[str]] = {}
        for c in checks:
            by_arg.setdefault(schema.args[c.position].name, list(c.dtypes))
        parts.append(f"`{schema.op}` takes " + ", ".join(f"{a}: {'/'.join(d)}" for a, d in by_arg.items()))
    return ("- Dtypes, as the kernels' bindings check them (their `TORCH_CHECK`s); the fake implementations raise the "
            "same errors for any other, so `torch.compile` refuses what the kernel would: " + "; ".join(parts) + ".")


def _convention_line(plan: ExportPlan) -> str:
    """How the formula calls a backward kernel of robust-kbench's convention, in the forward's argument names."""
    assert plan.backward_call is not None and plan.backward_schema is not None
    fwd = [a.name for a in plan.forward_schema.args]
    parts = []
    for c in plan.backward_call.call:
        parts.append("grad" if c.source == "grad" else fwd[c.index] if c.source == "arg" else f"{fwd[c.index]}.shape")
    return (" The kernel takes robust-kbench's backward convention, as the task's AutogradFunction calls it: "
            f"`torch.ops.{plan.name}.backward({', '.join(parts)})` (derived by `kbench export` from the reference; "
            f"`{plan.name}.backward(grad, *forward_args)` builds that call).")


def _no_grad(plan: ExportPlan) -> list[int]:
    if plan.backward is None or "backward" not in plan.task.directions:
        return []
    return list(plan.task.spec("backward").no_grad)


def _model_init(plan: ExportPlan) -> str:
    keys: dict[str, Any] = {}
    for c in plan.task.configs[:1]:
        keys = c.model_kwargs
    return ", ".join(f"{k}={v!r}" for k, v in keys.items())


def _model_signature(reference_text: str) -> str:
    """`Model.__init__`'s parameters as the reference writes them (self left out), for the drop-in's docstring."""
    try:
        module = ast.parse(reference_text)
    except SyntaxError:
        return "..."
    for node in module.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    item.args.args = item.args.args[1:]
                    return ast.unparse(item.args).replace("\\", "/").replace('"""', "'''")
            return ""
    return "..."


def export_json(plan: ExportPlan) -> dict[str, Any]:
    task = plan.task
    ops = {"forward": {**plan.forward_schema.to_json(),
                       "dtype_checks": [c.to_json() for c in _checks(plan.forward)]}}
    if plan.backward_schema is not None:
        ops["backward"] = {**plan.backward_schema.to_json(),
                           "dtype_checks": [c.to_json() for c in _checks(plan.backward)]}
        if plan.backward_call is not None:
            # robust-kbench's convention: the kernel's arguments from the gradient and the forward's arguments, and
            # for each gradient it returns the kernel argument whose shape and dtype it has (the fake's outputs)
            call = plan.backward_call.call
            ops["backward"]["call"] = [c.to_json() for c in call]
            ops["backward"]["grad_like"] = [next(j for j, c in enumerate(call) if c.source == "arg" and c.index == i)
                                            for i in plan.backward_call.grad_positions]
    tolerance = {d: {"atol": s.tolerance.atol, "rtol": s.tolerance.rtol,
                     "max_mismatch_fraction": s.max_mismatch_fraction} for d, s in task.directions.items()}
    return {
        "schema": 1, "namespace": plan.name, "task": task.name, "task_format": task.format,
        "description": task.description, "ops": ops, "no_grad": _no_grad(plan),
        "signatures": {d: s.signature for d, s in task.directions.items()},
        "tolerance": tolerance,
        "configs": [{"name": c.name, "model_kwargs": c.model_kwargs, "input_kwargs": c.input_kwargs,
                     "seed": c.seed, "init": c.init} for c in task.configs],
        "kernels": {k.direction: readme_parts.kernel_json(k) for k in (plan.forward, plan.backward) if k is not None},
        "forced": plan.forced, "warnings": plan.warnings, "notes": plan.notes,
        "archs": list(plan.archs), "verified_with_torch": targets.torch_version(),
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
