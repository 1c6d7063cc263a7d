"""The compile stage of a Triton candidate (kernel.py + the binding.py kbench generated, engine/tasks/glue/triton.py).

Triton compiles a @triton.jit kernel at its first launch, for the GPU it launches on, so without a GPU there is
nothing to compile ahead: the stage checks what can be checked on any machine, in the same jailed import child as a
KernelBench ModelNew (engine/harness/kernelbench/compile.py, jailed like a compiler, bounded by IMPORT's limits, no
GPU visible): both files parse, they import (the candidate's module-level code runs there, not in kbench), binding.py
exports the direction's function and kernel.py its launcher; its @triton.jit kernels are named in the log. The
cache entry keeps both files under src/, which the runner loads (engine/pipeline/candidate_spec.py); a GPU's first
call compiles the kernels inside the runner's jail, into its scratch TRITON_CACHE_DIR.
"""

from __future__ import annotations

import ast
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from engine.candidates import Candidate
from engine.errors import DataError
from engine.harness.build.steps import StepResult, _Failed, compile_jail
from engine.harness.kernelbench.child_types import CompileRequest, CompileResult
from engine.harness.toolchain import Toolchain
from engine.harness.triton_load import BINDING_FILE, KERNEL_FILE
from engine.jail.limits import IMPORT
from engine.procs import ChildOutcome, run_child

TRITON_CHECKED = ("Triton: kernel.py and binding.py imported and checked in the jail; the kernels compile at their "
                  "first launch, on a GPU")


def child_result(outcome: ChildOutcome, main: str, timings: dict[str, float]) -> CompileResult:
    """The import child's result, read strictly (it ran the candidate's code, which may have overwritten it): a
    result kbench's child never writes is the candidate's compile failure. Its time goes into `timings`."""
    timings["import"] = round(outcome.seconds, 3)
    try:
        return CompileResult.from_json(outcome.result or {})
    except DataError as exc:
        raise _Failed("compile", f"the import of {main} left a result kbench cannot read ({exc}): kbench's child "
                                 "writes none such, so the candidate's code overwrote it") from None


def direction_of(binding: str) -> str:
    """The direction binding.py exports (`def forward` or `def backward` at module level)."""
    try:
        tree = ast.parse(binding)
    except SyntaxError:
        return ""
    found = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in ("forward", "backward")]
    return found[0] if len(found) == 1 else ""


def build_triton(candidate: Candidate, module_name: str, tc: Toolchain, src: Path, deadline: float,
                 steps: list[StepResult], timings: dict[str, float]) -> None:
    """Check a Triton candidate in the jailed import child; raise _Failed with the reason where it does not load."""
    if BINDING_FILE not in candidate.files:
        raise _Failed("invalid", "a Triton candidate (kernel.py) builds with the binding.py its task generates: "
                                 "materialise it for the task first (engine.tasks.glue.generated.materialise; "
                                 "evaluate() and `kbench eval` do)")
    for rel in (KERNEL_FILE, BINDING_FILE):
        try:
            ast.parse(candidate.files[rel], filename=rel)
        except SyntaxError as exc:
            raise _Failed("compile", f"{rel}:{exc.lineno}: Python syntax error: {exc.msg}.") from None
    direction = direction_of(candidate.files[BINDING_FILE])
    if not direction:
        raise _Failed("compile", f"{BINDING_FILE} defines neither `forward` nor `backward` (exactly one of them)")
    with tempfile.TemporaryDirectory(prefix="kbench-import-") as tmp:
        box = Path(tmp)
        os.chmod(box, 0o711)
        (box / "src").mkdir(mode=0o755)
        for rel in (KERNEL_FILE, BINDING_FILE):
            shutil.copyfile(src / rel, box / "src" / rel)
            os.chmod(box / "src" / rel, 0o644)
        scratch = box / "scratch"
        scratch.mkdir(mode=0o700)
        request = CompileRequest(py_path=str(box / "src"), module_name=module_name, triton_entry=direction,
                                 triton_launcher=f"kb_{direction}")
        env = {"CUDA_VISIBLE_DEVICES": "", "HOME": str(scratch), "TMPDIR": str(scratch),
               "TRITON_CACHE_DIR": str(scratch / ".triton"), "PYTHONDONTWRITEBYTECODE": "1"}
        timeout = max(deadline - time.monotonic(), 5.0)
        outcome = run_child("engine.harness.kernelbench.compile", request.to_json(), timeout_s=timeout,
                            extra_env=env, jail=compile_jail(scratch, [box / "src"], tc, IMPORT))
    res = child_result(outcome, KERNEL_FILE, timings)
    said = (f"@triton.jit kernels: {', '.join(res.kernels)}" if res.kernels else "no @triton.jit kernel found")
    broken = outcome.timed_out or outcome.returncode != 0 or bool(res.import_error) or not res.finished
    steps.append(StepResult(f"import {KERNEL_FILE}", (sys.executable, "-m", "engine.harness.kernelbench.compile"),
                            (outcome.returncode or 1) if broken else 0,
                            (said + "\n" + (res.traceback or res.import_error or "")).strip(), outcome.seconds,
                            outcome.timed_out, timeout, outcome.report))
    if outcome.timed_out:
        raise _Failed("timeout", f"the import of {KERNEL_FILE} took over {timeout:.0f} s")
    if res.import_error:
        raise _Failed("compile", f"{KERNEL_FILE} does not import, so the candidate cannot be loaded: "
                                 f"{res.import_error}")
    if not res.finished:
        raise _Failed("internal", f"the import of {KERNEL_FILE} did not finish: {outcome.describe_crash()}")
    steps.append(StepResult("triton", (), 0, "Triton compiles the kernels at their first launch, on the GPU that "
                            "runs them (no GPU here: the module was imported and checked)", 0.0))
