"""Import a Triton candidate (kernel.py and the binding.py kbench generated for it, engine/tasks/glue/triton.py):
in the jailed compile child, which checks that it imports, and in the runner, which calls its binding.

binding.py says `from kernel import kb_forward`, as a person running it beside kernel.py would; here kernel.py is
imported under a name of its own (so two candidates in one process never share a module) and stands as `kernel`
only while binding.py is imported. It imports no torch itself (the
binding does).
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

from engine.harness.runtimes.base import import_file

KERNEL_FILE, BINDING_FILE = "kernel.py", "binding.py"


def load_triton(folder: Path, module_name: str) -> ModuleType:
    """The binding module of the Triton candidate in `folder`; its kernel module is `module_name + "_kernel"`."""
    loaded = sys.modules.get(module_name)
    if loaded is not None and getattr(loaded, "__file__", None) == str(folder / BINDING_FILE):
        return loaded
    kernel = import_file(folder / KERNEL_FILE, f"{module_name}_kernel")
    saved = sys.modules.get("kernel")
    sys.modules["kernel"] = kernel
    try:
        return import_file(folder / BINDING_FILE, module_name)
    finally:
        if saved is None:
            sys.modules.pop("kernel", None)
        else:
            sys.modules["kernel"] = saved


def jit_kernels(module: ModuleType) -> list[str]:
    """The names of the module's Triton kernels (@triton.jit, possibly under @triton.autotune / @triton.heuristics),
    read off the objects triton made; [] where triton is not importable."""
    try:
        from triton.runtime.jit import KernelInterface  # lazy: triton is optional and heavy
    except ImportError:
        return []
    return sorted(n for n, v in vars(module).items() if isinstance(v, KernelInterface))
