"""Gather what an export needs: the kernels (forward, and backward when one is verified), the task's
reference and configs, the op schemas, and the verdicts and measurements the kernels were exported with.

Two sources: a workspace candidate (`plan_from_workspace`), or candidate folders given directly with their task
(`plan_from_dirs`, e.g. a task's shipped baselines). Nothing is written here; `writer.write_package` renders.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from engine.candidates import Candidate
from engine.errors import KbenchError
from engine.eval_records import lookup
from engine.export import names
from engine.export.autograd_call import DerivedCall, autograd_backward_schema, derive_call
from engine.export.errors import ExportError
from engine.export.kernel_source import KernelSource
from engine.export.kernelbench import KernelBenchPlan, kernelbench_plan
from engine.export.schema import CppEntry, OpSchema, backward_schema, find_entry, forward_schema
from engine.export.targets import export_archs
from engine.export.triton_package import TritonPlan, triton_plan
from engine.pipeline.eval_types import default_cache_root
from engine.tasks.glue.generated import load_for_task
from engine.tasks.loader import load_task
from engine.tasks.model import Task
from engine.verdict import Stage

if TYPE_CHECKING:
    from engine.workspace.views import CandidateStatus
    from engine.workspace.workspace import Workspace

EXPORTABLE_FORMATS = ("native", "robust-kbench", "kernelbench", "triton")
# robust-kbench's backward kernel takes what the task's AutogradFunction.backward passes it (task-specific, e.g.
# (grad_output, x, weights) or (ctx.saved_tensors, grad_output)) and returns what that method unpacks. For a native
# task export derives the formula from the reference (engine/export/autograd_call.py) where every argument follows
# from the gradient and fn's arguments; a robust-kbench task folder's backward is not exported.
ROBUST_KBENCH_BACKWARD = ("task {task!r} takes robust-kbench's backward convention: its backward kernel takes the "
                          "task-specific "
                          "arguments of AutogradFunction.backward, which export cannot wire into an autograd "
                          "formula; export the forward kernel alone (--no-backward).")


@dataclass
class ExportPlan:
    name: str                            # package, op namespace and distribution name
    task: Task
    reference_name: str                  # file name of the reference module in the task
    reference_text: str
    forward: KernelSource
    forward_schema: OpSchema
    backward: KernelSource | None = None
    backward_schema: OpSchema | None = None
    # robust-kbench's backward convention: how the formula builds the kernel's arguments (None: kbench's generic
    # backward(grad, *forward args))
    backward_call: DerivedCall | None = None
    forced: bool = False
    warnings: list[str] = field(default_factory=list)   # written into the README (forced exports)
    notes: list[str] = field(default_factory=list)      # why no backward, etc.
    archs: tuple[str, ...] = ()          # the GPUs the package builds for (targets.export_archs), set by _finish

    @property
    def class_name(self) -> str:
        return names.class_name(self.name)


AnyPlan = ExportPlan | KernelBenchPlan | TritonPlan   # an op package, a KernelBench ModelNew one, a Triton one


# ------------------------------------------------------------------------------------------- kernels


def _check_format(candidate: Candidate, where: str) -> None:
    if candidate.format not in EXPORTABLE_FORMATS:
        raise ExportError(f"{where} is a {candidate.format} candidate; export builds native (kernel.cu + "
                          "binding.cpp), robust-kbench (.cu with PYBIND11_MODULE), KernelBench ModelNew and Triton "
                          "(kernel.py) candidates only.")


def _entry(candidate: Candidate, direction: str, where: str) -> CppEntry:
    _check_format(candidate, where)
    if candidate.format == "kernelbench":     # the package is ModelNew itself (engine/export/kernelbench.py)
        return CppEntry("ModelNew", None, None)
    if candidate.format == "triton":          # the launcher behind the generated binding (triton_package.py)
        return CppEntry(f"kb_{direction}", None, None)
    main = "binding.cpp" if candidate.format == "native" else candidate.main_file
    try:
        return find_entry(candidate.files[main], direction)
    except ExportError as exc:
        raise ExportError(f"{where} ({main}): {exc}") from None


def passing_status(status: CandidateStatus) -> tuple[bool, str]:
    """(passing, why not): the candidate's judgement (engine.verdict.judge, CandidateStatus.judgement) passed:
    compile and correctness passed by checks that ran (an override may change a verdict, never invent a
    measurement), and no stage failed or is suspicious."""
    j = status.judgement
    if j.passed:
        return True, ""
    if not j.blocked and Stage.CORRECTNESS in j.unran and Stage.CORRECTNESS in status.stages:
        return False, f"it was never measured on a GPU: {status.never_measured()}"
    return False, j.why_not_passed


# ------------------------------------------------------------------------------------------ schemas


def _autograd_call(task: Task, reference_text: str | None = None) -> DerivedCall:
    """The derived call of a task under robust-kbench's backward convention (autograd_call.py); a robust-kbench
    task folder's is refused as before."""
    if task.format != "native":
        raise ExportError(ROBUST_KBENCH_BACKWARD.format(task=task.name))
    try:
        return derive_call(task, reference_text)
    except ExportError:
        raise
    except Exception as exc:     # the task's own code failed on the CPU
        raise ExportError(f"task {task.name!r}: deriving the autograd formula of its backward convention failed: "
                          f"{type(exc).__name__}: {exc}") from None


def _schemas(task: Task, forward: KernelSource, backward: KernelSource | None,
             reference_text: str | None = None) -> tuple[OpSchema, OpSchema | None, DerivedCall | None]:
    if task.format not in ("native", "robust-kbench"):
        raise ExportError(f"task {task.name!r} is a {task.format} task: it has no functional forward_fn whose "
                          "signature an op schema could take; export supports native and robust-kbench tasks.")
    if "forward" not in task.directions:
        raise ExportError(f"task {task.name!r} has no forward direction; an exported op needs a forward kernel.")
    try:
        fwd = forward_schema(task.spec("forward").signature, forward.entry)
    except ExportError as exc:
        raise ExportError(f"task {task.name!r}: {exc}") from None
    bwd = None
    call = None
    if backward is not None:
        if "backward" not in task.directions:
            raise ExportError(f"task {task.name!r} has no backward direction; its backward kernel has no contract.")
        spec = task.spec("backward")
        try:
            if spec.autograd_backward:
                call = _autograd_call(task, reference_text)
                bwd = autograd_backward_schema(fwd, task, call, backward.entry)
            else:
                bwd = backward_schema(fwd, spec.signature, spec.no_grad, backward.entry)
        except ExportError as exc:
            msg = str(exc)
            raise ExportError(msg if msg.startswith("task ") else f"task {task.name!r}: {msg}") from None
    return fwd, bwd, call


def _reference(task: Task, folder: Path | None = None) -> tuple[str, str]:
    spec = task.spec("forward") if "forward" in task.directions else next(iter(task.directions.values()))
    path = Path(spec.reference_path)
    if folder is not None and (folder / path.name).is_file():
        path = folder / path.name
    try:
        return path.name, path.read_text()
    except OSError as exc:
        raise ExportError(f"task {task.name!r}: cannot read its reference {path} ({exc.strerror}).") from None


def _finish(plan: AnyPlan, force: bool, archs: str | None = None) -> AnyPlan:
    plan.archs = export_archs(archs)
    refused = [k for k in (plan.forward, plan.backward) if k is not None and not k.passing]
    for k in refused:
        msg = f"the {k.direction} kernel ({k.origin}) has no passing verdict: {k.why_not_passing}."
        if not force:
            how = (f"Evaluate it first (`kbench reevaluate {k.candidate_id}` on a machine with a GPU), or pass"
                   if k.candidate_id else "Or pass")
            raise ExportError(f"refusing to export: {msg} {how} --force to export it anyway "
                              "(the package README then carries this warning).")
        plan.warnings.append(msg)
    plan.forced = bool(refused)
    return plan


# ------------------------------------------------------------------------------------------ folders


def plan_from_dirs(from_dir: str | Path, task_ref: str | Path, backward_dir: str | Path | None = None,
                   name: str | None = None, force: bool = False, archs: str | None = None) -> AnyPlan:
    """Export candidate folders (or robust-kbench .cu files) with their task. A task's shipped baseline counts
    as passing (the GPU test suite checks every baseline on every config); any other folder by what `kbench eval`
    recorded for its exact sources (engine/eval_records.py), else it needs `force`. `archs`: the GPUs to build
    for (TORCH_CUDA_ARCH_LIST syntax; targets.export_archs)."""
    name = names.check_name(name) if name else None
    try:
        task = task_ref if isinstance(task_ref, Task) else load_task(task_ref)
    except KbenchError as exc:
        raise ExportError(str(exc)) from None

    def kernel(path: str | Path, direction: str) -> KernelSource:
        p = Path(path)
        try:
            cand = load_for_task(p, task, direction)   # a kernel-only folder gets the generated binding
        except KbenchError as exc:
            raise ExportError(str(exc)) from None
        where = f"{p}"
        entry = _entry(cand, direction, where)
        baseline = task.baseline_dir(direction)
        shipped = baseline is not None and p.is_dir() and p.resolve() == baseline.resolve()
        if shipped:
            return KernelSource(direction, cand, entry, f"the shipped {direction} baseline of task {task.name} ({p})",
                                passing=True)
        passing, origin, why = _folder_verdict(task, direction, cand, p)
        return KernelSource(direction, cand, entry, origin, passing=passing, why_not_passing=why)

    fwd = kernel(from_dir, "forward")
    if fwd.candidate.format == "triton":
        if backward_dir is not None:
            raise ExportError("a Triton candidate exports as the forward op only (no --backward-dir yet).")
        return _finish(triton_plan(name or names.default_name(task.name), task, *_reference(task), fwd), force,
                       archs)
    if task.format == "kernelbench":
        if backward_dir is not None:
            raise ExportError(f"task {task.name!r} is a KernelBench problem: it has a forward only.")
        return _finish(kernelbench_plan(name or names.default_name(task.name), task, *_reference(task), fwd),
                       force, archs)
    bwd = kernel(backward_dir, "backward") if backward_dir is not None else None
    ref_name, ref_text = _reference(task)
    fs, bs, call = _schemas(task, fwd, bwd)
    plan = ExportPlan(name or names.default_name(task.name), task, ref_name, ref_text,
                      fwd, fs, bwd, bs, backward_call=call)
    if bwd is None and "backward" in task.directions:
        plan.notes.append("No backward kernel was given (--backward-dir), so the op has no autograd formula.")
    return _finish(plan, force, archs)


def _folder_verdict(task: Task, direction: str, cand: Candidate, p: Path) -> tuple[bool, str, str]:
    """(passing, origin, why not) for a folder: what `kbench eval` recorded for these exact sources."""
    rec, why = lookup(task, direction, cand, default_cache_root())
    if rec is None:
        return False, f"folder {p}", (f"{why}; run `kbench eval {task.root} {p}` on a machine with a GPU, and "
                                      "export it then")
    origin = f"folder {p} (kbench eval on {rec.gpu or 'a GPU'} at {rec.at}: {rec.summary})"
    return rec.passing, origin, "" if rec.passing else f"kbench eval found: {rec.summary}"


# ---------------------------------------------------------------------------------------- workspace


def _session_task(ws: Workspace, session: str, query: str) -> tuple[Task, str, str]:
    """The session's task (from session.json) and its reference file as committed with the candidate."""
    info = ws._session_json(session)  # the task as it was when the session started (configs, signatures)
    obj = info.get("task_json")
    if not obj:
        raise ExportError(f"session {session!r} records no task (no task_json in its session.json).")
    task = Task.from_json(obj)
    with tempfile.TemporaryDirectory(prefix="kbench-export-") as tmp:
        ws.checkout(query, tmp, with_task=True)
        ref_name, ref_text = _reference(task, Path(tmp))
    return task, ref_name, ref_text


def _ws_kernel(ws: Workspace, query: str, direction: str) -> KernelSource:
    view = ws.view(query)
    rec = view.record
    info = ws.session(rec.session)
    if info.direction != direction:
        hint = (f" Export a forward candidate and name this one with --backward {rec.id}."
                if info.direction == "backward" else "")
        raise ExportError(f"candidate {rec.id} belongs to session {rec.session!r}, a {info.direction} session; "
                          f"a {direction} kernel is needed here.{hint}")
    cand = ws.files(rec.id)
    where = f"candidate {rec.id}"
    entry = _entry(cand, direction, where)
    passing, why = passing_status(view.status)
    return KernelSource(direction, cand, entry, f"workspace candidate {rec.id} (commit {rec.commit[:12]})",
                        candidate_id=rec.id, commit=rec.commit, session=rec.session, passing=passing,
                        why_not_passing=why, status=view.status.to_json())


def find_backward(ws: Workspace, task: Task) -> tuple[str | None, str]:
    """The best verified backward candidate for `task` in the workspace: passing correctness, nothing failed
    or suspicious, exportable format; the highest speedup wins (ties: earlier generation). (id, why-none)."""
    best = None
    looked = 0
    for s in ws.sessions():
        if s.task != task.name or s.direction != "backward" or s.task_format != task.format:
            continue
        looked += 1
        for v in ws.candidates(s.name, strict=False):
            if v.problem or not passing_status(v.status)[0]:
                continue
            if (v.record.format or "native") not in EXPORTABLE_FORMATS:
                continue
            key = (-(v.status.speedup or 0.0), v.record.generation, v.record.n, v.record.id)
            if best is None or key < best[0]:
                best = (key, v.record.id)
    if best is not None:
        return best[1], ""
    if not looked:
        return None, f"the workspace has no backward session for task {task.name}"
    return None, f"no candidate of the task's {looked} backward session(s) has a passing verdict"


def plan_from_workspace(ws: Workspace, query: str, name: str | None = None, force: bool = False,
                        backward: str | None = None, with_backward: bool = True,
                        archs: str | None = None) -> AnyPlan:
    """Export workspace candidate `query` (a forward kernel). Its backward is `backward` when given, else the
    best verified backward candidate of the same task in the workspace (none: the op has no autograd)."""
    name = names.check_name(name) if name else None
    fwd = _ws_kernel(ws, query, "forward")
    task, ref_name, ref_text = _session_task(ws, fwd.session, fwd.candidate_id)
    if fwd.candidate.format == "triton":
        if backward:
            raise ExportError(f"--backward {backward}: a Triton candidate exports as the forward op only.")
        return _finish(triton_plan(name or names.default_name(task.name), task, ref_name, ref_text, fwd), force,
                       archs)
    if task.format == "kernelbench":
        if backward:
            raise ExportError(f"--backward {backward}: task {task.name!r} is a KernelBench problem: it has a forward "
                              "only.")
        return _finish(kernelbench_plan(name or names.default_name(task.name), task, ref_name, ref_text, fwd),
                       force, archs)
    notes = []
    bwd = None
    if backward and "backward" not in task.directions:
        raise ExportError(f"--backward {backward}: task {task.name!r} has no backward direction.")
    no_formula = ""
    if with_backward and "backward" in task.directions and task.spec("backward").autograd_backward and not backward:
        try:
            _autograd_call(task, ref_text)
        except ExportError as exc:
            no_formula = str(exc)
    if no_formula:
        why = no_formula.removesuffix(".").removesuffix(" (--no-backward)").removesuffix(
            "; export the forward kernel alone").removesuffix(": export the forward kernel alone")
        notes.append(f"No backward kernel: {why}; the op has no autograd formula.")
    elif with_backward and "backward" in task.directions:
        bid, why = (backward, "") if backward else find_backward(ws, task)
        if bid:
            bwd = _ws_kernel(ws, bid, "backward")
            btask = Task.from_json(ws._session_json(bwd.session)["task_json"])
            if btask.name != task.name:
                raise ExportError(f"backward candidate {bwd.candidate_id} is for task {btask.name!r}, "
                                  f"not {task.name!r}.")
        else:
            notes.append(f"No backward kernel: {why}; the op has no autograd formula.")
    elif "backward" in task.directions:
        notes.append("Exported without its backward kernel (--no-backward); the op has no autograd formula.")
    fs, bs, call = _schemas(task, fwd, bwd, ref_text)
    plan = ExportPlan(name or names.default_name(task.name), task, ref_name, ref_text,
                      fwd, fs, bwd, bs, backward_call=call, notes=notes)
    return _finish(plan, force, archs)
