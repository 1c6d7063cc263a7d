"""Static integrity checks: read a candidate's sources for reward hacks before any GPU time is spent.

The rules read syntax trees: tree-sitter's CUDA grammar for .cu/.cpp/.h (engine.integrity.cpp.scan) and
Python's `ast` for KernelBench ModelNew files (engine.integrity.py_scan) and Triton kernel.py files
(engine.integrity.triton_scan). Comments, strings, parameters,
return types and unused includes are never read as code. Each finding names its rule (the INTEGRITY.md
catalog), the file and line, a confidence and a status: `fail` only where the construct is unambiguous,
`suspicious` where a person should look, `info` for a library use the library policy allows.

The library policy (engine.integrity.policy) decides what vendor-library and ATen use means: a `fail` under
`pure`, a tag under `engineering` (the verdict's data lists every use, the app shows them); a fallback to
ATen for unhandled inputs is a `fail` under `pure` and `suspicious` under `engineering`.

Entry points: `gate_static` (the evaluator's stage), `scan_candidate` + `static_verdict` (the evolution
loop's pre-GPU check), `scan_cpp` / `scan_python` (one source).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Callable, Protocol

from engine.integrity.cpp.scan import scan_cpp_source
from engine.integrity.cpp.tree import parser_available
from engine.integrity.findings import (
    ATEN_FALLBACK,
    FAIL,
    INFO,
    NO_OWN_KERNEL,
    SUSPICIOUS,
    SYNTAX,
    TORCH_COMPUTE,
    VENDOR_LIBRARY,
    Finding,
)
from engine.integrity.policy import DEFAULT_POLICY, ResolvedPolicy, resolve_policy
from engine.integrity.py_scan import scan_python_source
from engine.integrity.triton_scan import scan_triton_source
from engine.tasks.glue.abi import GlueError, launcher_abi
from engine.tasks.glue.triton import binding_py_text
from engine.verdict import Stage, Status, Verdict

if TYPE_CHECKING:
    from engine.candidates import Candidate
    from engine.tasks.model import Task


class CollectsVerdicts(Protocol):
    """What gate_static appends its verdicts to (the pipeline's EvalReport; the floors never import the pipeline)."""

    verdicts: list[Verdict]


CPP_SUFFIXES = (".cu", ".cpp", ".cuh", ".h", ".hpp", ".cc", ".cxx")


def scan_cpp(name: str, raw: str, *, task_dtype: str = "float32", shape_values: Iterable[int] = (),
             line_offset: int = 0, policy: str = DEFAULT_POLICY) -> list[Finding]:
    """Findings for one C++/CUDA source. `shape_values` are the config sizes (for the shape hint)."""
    return scan_cpp_source(name, raw, task_dtype=task_dtype, shape_values=shape_values, policy=policy,
                           line_offset=line_offset)[0]


def scan_python(name: str, raw: str, *, task_dtype: str = "float32", shape_values: Iterable[int] = (),
                reference_modules: Iterable[str] = (), policy: str = DEFAULT_POLICY) -> list[Finding]:
    """Findings for a KernelBench ModelNew file: its Python, and the C++/CUDA sources in its strings."""
    return scan_python_source(name, raw, task_dtype=task_dtype, shape_values=shape_values,
                              reference_modules=reference_modules, policy=policy)[0]


def config_shape_values(task: Task | None) -> set[int]:
    vals: set[int] = set()
    for c in (task.configs if task is not None else ()):
        for v in list(c.model_kwargs.values()) + list(c.input_kwargs.values()):
            if isinstance(v, int) and not isinstance(v, bool):
                vals.add(v)
            elif isinstance(v, (list, tuple)):
                vals.update(x for x in v if isinstance(x, int) and not isinstance(x, bool))
    return vals


def scan_candidate(candidate: Candidate, task: Task | None = None, policy: str | None = None) -> list[Finding]:
    """All findings for a candidate (engine.candidates.Candidate) against a task (for dtype and sizes), under
    the library policy in force (`policy` is the session's choice; None: the task's, else the default)."""
    pol = resolve_policy(policy, task).policy
    dtype = (task.dtype if task is not None else "") or "float32"
    shapes = config_shape_values(task) if task is not None else set()
    refs: set[str] = set()
    if task is not None:
        refs.add(task.name)
        for spec in task.directions.values():
            refs.add(spec.reference_path.stem)
        refs.discard("")
    found: list[Finding] = []
    own_kernel = False
    for rel, text in sorted(candidate.files.items()):
        if candidate.format == "triton":
            f, own = _scan_triton_file(rel, text, task, dtype, shapes, refs, pol)
        elif rel.endswith(".py"):
            f, own = scan_python_source(rel, text, task_dtype=dtype, shape_values=shapes, reference_modules=refs,
                                        policy=pol)
        elif rel.endswith(CPP_SUFFIXES):
            f, facts = scan_cpp_source(rel, text, task_dtype=dtype, shape_values=shapes, policy=pol,
                                       own_files=list(candidate.files))
            own = facts.has_kernel
        else:
            continue
        found += f
        own_kernel |= own
    uses = [f for f in found if f.status == INFO]
    if uses and not own_kernel:
        libs = ", ".join(sorted({f.library for f in uses}))
        first = uses[0]
        found.append(Finding(NO_OWN_KERNEL, SUSPICIOUS, first.file, first.line, f"no kernel of the candidate's own "
                             f"(no __global__ function, no launch): the result comes entirely from {libs}", "", 0.8))
    return _dedupe(found)


def _scan_triton_file(rel: str, text: str, task: Task | None, dtype: str, shapes: set[int], refs: set[str],
                      policy: str) -> tuple[list[Finding], bool]:
    """A Triton candidate's kernel.py by the Triton rules (engine/integrity/triton_scan.py); its binding.py too,
    unless it is the text kbench generates for the task (then it is kbench's, not the candidate's)."""
    tensors: set[str] = set()
    generated: set[str] = set()
    for direction in (task.directions if task is not None else ()):
        try:
            abi = launcher_abi(task, direction)
        except GlueError:
            continue
        tensors.update(p.cname for p in (*abi.inputs, *abi.outputs) if p.kind == "tensor")
        generated.add(binding_py_text(abi))
    if rel == "binding.py" and text in generated:
        return [], False
    found, own = scan_triton_source(rel, text, task_dtype=dtype, shape_values=shapes, reference_modules=refs,
                                    policy=policy, tensor_args=tensors)
    if rel != "kernel.py":   # a helper or an edited binding need no kernel of their own
        found = [f for f in found if f.hack != NO_OWN_KERNEL]
    return found, own


def _dedupe(found: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in found:
        key = (f.hack, f.file, f.line)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def library_uses(findings: list[Finding]) -> dict[str, list[str]]:
    """Library -> the sites that use it ("file:line what"), for the verdict's data and the app."""
    out: dict[str, list[str]] = {}
    for f in findings:
        if f.library and f.hack in (TORCH_COMPUTE, VENDOR_LIBRARY, ATEN_FALLBACK):
            out.setdefault(f.library, []).append(f"{f.file}:{f.line} {f.snippet}"[:120])
    return out


def static_verdict(findings: list[Finding], policy: ResolvedPolicy | str | None = None) -> Verdict:
    """One `static` verdict: fail if any finding fails, suspicious if any is suspicious, else pass. The data
    holds every finding, the policy and (under `engineering`) the library uses, tagged."""
    rp = policy if isinstance(policy, ResolvedPolicy) else resolve_policy(policy)
    fails = [f for f in findings if f.status == FAIL]
    sus = [f for f in findings if f.status == SUSPICIOUS]
    uses = library_uses(findings)
    data: dict[str, Any] = {"findings": [f.to_json() for f in findings], "policy": rp.policy,
                            "policy_source": rp.source, "libraries": uses}
    tag = ""
    if uses and rp.policy == "engineering":
        tag = "; libraries (engineering policy): " + ", ".join(f"{lib} ({len(s)})" for lib, s in sorted(uses.items()))
    syntax = [f for f in fails if f.hack == SYNTAX]
    if syntax:      # a file that does not parse is a broken candidate, not a hack: say what breaks it
        return Verdict(Stage.STATIC, Status.FAIL, "the candidate does not parse: " +
                       "; ".join(f"{f.file}:{f.line}: {f.reason}" for f in syntax[:4]) +
                       (f"; and {len(syntax) - 4} more" if len(syntax) > 4 else ""), data)
    if fails:
        hacks = sorted({f.hack for f in fails})
        return Verdict(Stage.STATIC, Status.FAIL, f"reward hack ({', '.join(hacks)}; {rp.policy} policy): " +
                       "; ".join(f.describe() for f in fails[:4]) +
                       (f"; and {len(fails) - 4} more" if len(fails) > 4 else ""), data)
    if sus:
        hacks = sorted({f.hack for f in sus})
        return Verdict(Stage.STATIC, Status.SUSPICIOUS, f"possible reward hack ({', '.join(hacks)}), a person must "
                       "confirm: " + "; ".join(f.describe() for f in sus[:4]) + tag, data)
    return Verdict(Stage.STATIC, Status.PASS, "no reward-hack pattern in the sources" + tag, data)


def check_candidate(candidate: Candidate, task: Task | None = None, policy: str | None = None) -> Verdict:
    """scan_candidate + static_verdict under the policy in force; `skipped` when the parser cannot load."""
    why = parser_available()
    if why is not None:
        return Verdict(Stage.STATIC, Status.SKIPPED, f"the C++/CUDA parser is not available ({why}); install "
                       "tree-sitter and tree-sitter-cuda", {"policy": resolve_policy(policy, task).policy})
    try:
        findings = scan_candidate(candidate, task, policy)
    except Exception as exc:  # noqa: BLE001 - a scanner bug must not stop an evaluation: the dynamic checks still run
        return Verdict(Stage.STATIC, Status.SKIPPED, f"the static scanner failed on this candidate ({type(exc).__name__}: "
                       f"{exc}); the dynamic checks still judge it", {"policy": resolve_policy(policy, task).policy})
    return static_verdict(findings, resolve_policy(policy, task))


def gate_static(report: CollectsVerdicts, candidate: Candidate, task: Task | None, override: bool = False,
                say: Callable[[str], None] | None = None,
                policy: str | None = None) -> bool:
    """The evaluator's static stage: append the `static` verdict to `report`; False when it must stop there.

    A `fail` stops before compile and GPU time unless a person overrides it (EvalOptions.override_static);
    the overridden verdict stays in the report, marked, so the override is visible. `policy` is the
    session's library policy (EvalOptions.library_policy; None: the task's, else the default).
    """
    v = check_candidate(candidate, task, policy)
    if v.status == Status.FAIL and override:
        v = Verdict(v.stage, v.status, v.reason + " (overridden by a person: evaluation continues)",
                    {**v.data, "overridden": True})
    report.verdicts.append(v)
    if v.status == Status.FAIL and not override:
        if say:
            say("static check failed: not compiled")
        report.verdicts.append(Verdict(Stage.COMPILE, Status.SKIPPED, "not compiled: the static check failed"))
        return False
    return True
