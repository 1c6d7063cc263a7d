"""Export a kernel as a torch extension package (`kbench export`; docs/formats.md, "Export").

- `plan_from_workspace(ws, id, ...)` / `plan_from_dirs(folder, task, ...)`: gather kernels, task, schemas,
  verdicts (engine/export/plan.py; schemas in schema.py).
- `write_package(plan, out)`: render engine/export/templates/ into the package (writer.py).
- A KernelBench ModelNew makes a package of its own (kernelbench.py): plan_from_* return a KernelBenchPlan for it.
"""

from engine.export.errors import ExportError
from engine.export.kernelbench import KernelBenchPlan
from engine.export.plan import ExportPlan, KernelSource, plan_from_dirs, plan_from_workspace
from engine.export.writer import package_files, write_package

__all__ = [
           "ExportError",
           "ExportPlan",
           "KernelBenchPlan",
           "KernelSource",
           "package_files",
           "plan_from_dirs",
           "plan_from_workspace",
           "write_package",
]
