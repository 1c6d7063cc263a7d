"""Export a KernelBench `ModelNew` (a .py that builds its kernels with load_inline when imported) as a package.

A KernelBench problem has no functional forward_fn, so no op schema follows from it: the package is the ModelNew
itself, its kernels prebuilt. Its file ships byte for byte as `src/NAME/model_new.py`; each load_inline call it
makes becomes an extension of the package (`NAME.ext0`, ...) built by setup.py from `csrc/ext0/main.cpp` and
`cuda.cu`, the files torch's own load_inline writes for that call (recorded by importing the file, jailed, with
torch's compile step replaced: engine/harness/kernelbench/sources.py), with the call's extra flags. When the
package imports model_new.py, its load_inline calls get those extensions instead of a compile, provided the
sources torch writes for them are byte for byte the exported ones (their hashes are in export.json); otherwise
they raise (src/NAME/_prebuilt.py, templates/kernelbench/). `load` of files, extra include paths (machine paths)
and two calls of one name are refused.

The rest is the op package's: the README's install-and-test block, setup.py (CUDA found as kbench finds it, the
GPUs chosen at export with PTX, stripped, torch pinned), provenance, verdicts, measurements; tests compare
ModelNew with Model on every config as kbench's KernelBench runtime does (GPU), and check on the CPU that the
extensions import, that importing the model compiles nothing, and that other sources are refused.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from engine.export import readme_parts, targets
from engine.export.errors import ExportError
from engine.export.kernel_source import KernelSource
from engine.export.render import render
from engine.harness.kernelbench.sources import InlineExtension, SourcesError, record_sources
from engine.tasks.model import Task

VERSION = "0.1.0"
_PYDEF = re.compile(r'm\.def\("(\w+)"')


@dataclass
class KernelBenchPlan:
    name: str
    task: Task
    reference_name: str
    reference_text: str
    forward: KernelSource                # the ModelNew candidate (its entry is "ModelNew")
    extensions: list[InlineExtension]
    backward: None = None                # KernelBench problems have a forward only
    forced: bool = False
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    archs: tuple[str, ...] = ()


def kernelbench_plan(name: str, task: Task, reference_name: str, reference_text: str,
                     kernel: KernelSource) -> KernelBenchPlan:
    """The plan for a ModelNew candidate of KernelBench problem `task`: its load_inline sources, recorded."""
    if kernel.candidate.format != "kernelbench":
        raise ExportError(f"task {task.name!r} is a KernelBench problem: its candidates are ModelNew files, and "
                          f"{kernel.origin} is a {kernel.candidate.format} candidate.")
    try:
        extensions = record_sources(kernel.candidate)
    except SourcesError as exc:
        raise ExportError(f"{kernel.origin}: {exc}") from None
    if not extensions:
        raise ExportError(f"{kernel.origin}: ModelNew builds no kernel with load_inline; there is nothing to export "
                          "(its forward runs PyTorch).")
    for e in extensions:
        if e.flag_list("extra_include_paths"):
            raise ExportError(f"{kernel.origin}: load_inline {e.name!r} adds include paths of this machine "
                              f"({', '.join(e.flag_list('extra_include_paths'))}); a package cannot carry them.")
    return KernelBenchPlan(name, task, reference_name, reference_text, kernel, extensions)


def module_of(i: int) -> str:
    return f"ext{i}"


def package_files(plan: KernelBenchPlan) -> dict[str, str]:
    """Every file of the ModelNew package, relative path -> text."""
    ns = plan.name
    files: dict[str, str] = {}
    extensions = []
    for i, e in enumerate(plan.extensions):
        sources = []
        for fname, text in sorted(e.sources.items()):
            files[f"csrc/{module_of(i)}/{fname}"] = text
            sources.append(f"csrc/{module_of(i)}/{fname}")
        extensions.append((module_of(i), sources, e.flag_list("extra_cflags"), e.flag_list("extra_cuda_cflags"),
                           e.flag_list("extra_ldflags")))
    values = _values(plan, extensions)
    rendered = {"pyproject.toml": "pyproject.toml", "setup.py": "setup.py", "MANIFEST.in": "MANIFEST.in",
                "README.md": "kernelbench/README.md", f"src/{ns}/__init__.py": "kernelbench/__init__.py",
                f"src/{ns}/_prebuilt.py": "kernelbench/_prebuilt.py", "tests/conftest.py": "tests/conftest.py",
                f"tests/test_{ns}_cpu.py": "kernelbench/test_cpu.py", f"tests/test_{ns}.py": "kernelbench/test_gpu.py"}
    for rel, template in rendered.items():
        files[rel] = render(template, values)
    files[f"src/{ns}/model_new.py"] = plan.forward.candidate.files[plan.forward.candidate.main_file]
    files[f"src/{ns}/reference.py"] = plan.reference_text
    files[f"src/{ns}/export.json"] = json.dumps(export_json(plan), indent=2, default=str) + "\n"
    return files


def _values(plan: KernelBenchPlan, extensions: list) -> dict[str, str]:
    ns, task = plan.name, plan.task
    desc = (task.description or f"KernelBench problem {task.name}").strip().splitlines()[0]
    desc = desc.replace("\\", "/").replace('"""', "'''")
    warnings = ("\n> **WARNING: exported with --force.** " + " ".join(plan.warnings)
                + " Treat this kernel as unverified.\n") if plan.warnings else ""
    csrc = [f"csrc/{module_of(i)}/".ljust(30) + f"load_inline {e.name!r}: {', '.join(sorted(e.sources))}, as torch "
            "writes them" for i, e in enumerate(plan.extensions)]
    return {
        "namespace": ns, "version": VERSION, "description": repr(desc), "description_line": desc,
        "task_name": task.name, "dtype": task.dtype, "origin": plan.forward.origin,
        "exported_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "warnings": warnings,
        "notes": "".join(f"- {n}\n" for n in plan.notes), "reference_name": plan.reference_name,
        "model_file": plan.forward.candidate.main_file, "provenance": readme_parts.provenance(plan),
        "verdicts": readme_parts.verdicts(plan), "measurements": readme_parts.measurements(plan),
        "csrc_listing": "\n".join(csrc), "extensions": targets.py_list(extensions),
        "extensions_doc": ("Each load_inline call of ModelNew's file is its own extension module (NAME.ext0, ...), "
                           "as it was its own\nmodule under load_inline."),
        "extension_rows": "\n".join(f"| `{ns}.{module_of(i)}` | `{e.name}` | {', '.join(_functions(e)) or '—'} |"
                                    for i, e in enumerate(plan.extensions)),
        **targets.build_values(plan.archs, plan.forward.candidate.files),
    }


def _functions(e: InlineExtension) -> list[str]:
    return _PYDEF.findall(e.sources.get("main.cpp", ""))


def export_json(plan: KernelBenchPlan) -> dict[str, Any]:
    task = plan.task
    spec = task.spec("forward")
    return {
        "schema": 1, "namespace": plan.name, "task": task.name, "task_format": task.format, "kind": "modelnew",
        "description": task.description, "dtype": task.dtype,
        "tolerance": {"forward": {"atol": spec.tolerance.atol, "rtol": spec.tolerance.rtol,
                                  "max_mismatch_fraction": spec.max_mismatch_fraction}},
        "configs": [{"name": c.name, "input_kwargs": c.input_kwargs, "seed": c.seed} for c in task.configs],
        "extensions": [{"name": e.name, "module": module_of(i), "functions": _functions(e),
                        "sha256": {f: hashlib.sha256(t.encode()).hexdigest() for f, t in sorted(e.sources.items())},
                        "flags": e.flags} for i, e in enumerate(plan.extensions)],
        "model_file": plan.forward.candidate.main_file,
        "kernels": {"forward": readme_parts.kernel_json(plan.forward)},
        "forced": plan.forced, "warnings": plan.warnings, "notes": plan.notes,
        "archs": list(plan.archs), "verified_with_torch": targets.torch_version(),
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
