"""Task and candidate facts rendered as prompt text: the values the templates' placeholders take."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from engine.candidates import Candidate
from engine.tasks.glue import glue_header
from engine.tasks.glue_abi import GlueError
from engine.tasks.model import Task, default_timing_configs
from engine.tasks.robust_kbench import BACKWARD_CONTRACT as RKB_CONTRACT

if TYPE_CHECKING:
    from engine.workspace import Measurement

_FENCE = {".cu": "cuda", ".cuh": "cuda", ".cpp": "cpp", ".h": "cpp", ".hpp": "cpp", ".py": "python"}

BACKWARD_CONTRACT = (
    "The harness calls `model(*inputs, fn=capture)` to learn the arguments `forward` passes to `fn` "
    "(`fn_args`). The candidate is called as `candidate.backward(grad_output, *fn_args)` and must return one "
    "gradient per floating-point tensor in `fn_args`, in order (a tuple or list); integer tensors and Python "
    "scalars get none. The reference gradient is `torch.autograd.grad(forward_fn(*fn_args), "
    "float_tensors_of(fn_args), grad_output)`.")


# What each init scheme of engine.tasks.inits feeds the candidate (its floating-point inputs).
INIT_MEANINGS = {
    "normal": "the task's own get_inputs() values (usually standard normal)",
    "uniform": "uniform in [-1, 1)",
    "wide": "normal with standard deviation 8: large magnitudes",
    "offset": "normal(3, 0.5): a large mean and a small spread (breaks one-pass variance)",
    "small": "normal with standard deviation 1e-3: tiny values (relative error matters)",
    "large": "normal(100, 30): exp() of these overflows fp32 (softmax / log-sum-exp need the max subtracted)",
    "sparse": "normal, with about half of the entries exactly zero",
}


def context_values(task: Task, direction: str, target: str = "") -> dict[str, Any]:
    """Placeholder values for context.md: the stable, cached part of every prompt about this task."""
    spec = task.spec(direction)
    try:
        reference = spec.reference_path.read_text().rstrip()
    except OSError as exc:
        reference = f"# (reference unreadable: {exc})"
    fn_name = "Model.forward" if task.format == "kernelbench" else "forward_fn"
    if direction == "backward":
        fn_name = f"the gradient of {fn_name}"
    return {
        "task_name": task.name, "direction": direction, "description": task.description or "(no description)",
        "dtype": task.dtype, "signature": spec.signature, "atol": f"{spec.tolerance.atol:g}",
        "rtol": f"{spec.tolerance.rtol:g}", "reference": reference, "fn_name": fn_name,
        "configs": render_configs(task), "init_schemes": render_inits(task),
        "backward_contract": _backward_contract(task) if direction == "backward" else "",
        "target": target, "launcher_abi": launcher_abi_text(task, direction),
    }


def launcher_abi_text(task: Task, direction: str) -> str:
    """The launcher a kernel-only answer defines (engine/tasks/glue.py); "" where the signature has no generated
    glue (then every answer carries its binding.cpp)."""
    try:
        return glue_header(task, direction).rstrip()
    except GlueError:
        return ""


def render_inits(task: Task) -> str:
    used = dict.fromkeys(c.init for c in task.configs)
    return "\n".join(f"- `{name}`: {INIT_MEANINGS.get(name, 'see engine/tasks/inits.py')}" for name in used)


def render_timings(measurement: Measurement | None) -> str:
    """Per-config times of a measurement (engine.workspace.Measurement) against eager and torch.compile."""
    if measurement is None or not measurement.configs:
        return ""
    lines = ["| config | candidate ms | eager ms | vs eager | torch.compile ms | vs compile |",
             "|---|---|---|---|---|---|"]
    for c in measurement.configs:
        def f(x: Any, fmt: str) -> str:
            return format(x, fmt) if x is not None else "-"
        lines.append(f"| {c.config} | {f(c.ms, '.4f')} | {f(c.eager_ms, '.4f')} | {f(c.speedup_eager, '.2f')}x | "
                     f"{f(c.compile_ms, '.4f')} | {f(c.speedup_compile, '.2f')}x |")
    where = f" on {measurement.gpu}" if measurement.gpu else ""
    return f"Measured{where}:\n\n" + "\n".join(lines)


def estimate_tokens(text: str) -> int:
    """A conservative token count for CUDA/C++ source (about 3 characters a token)."""
    return len(text) // 3 + 1


def _backward_contract(task: Task) -> str:
    if task.format == "robust-kbench":  # upstream's task-specific convention, not kbench's generic one
        return RKB_CONTRACT
    return BACKWARD_CONTRACT


def render_configs(task: Task) -> str:
    """One line a config; those the evaluation times by default (engine.tasks.model) end in "timed"."""
    timed = default_timing_configs(task) or []
    lines = []
    for c in task.configs:
        args = ", ".join(f"{k}={v}" for k, v in {**c.model_kwargs, **c.input_kwargs}.items())
        lines.append(f"- `{c.name}`: {args or 'no args'}; init `{c.init}`, seed {c.seed}"
                     + ("; timed" if c.name in timed else ""))
    return "\n".join(lines) or "- (none listed)"


def render_files(files: dict[str, str]) -> str:
    parts = []
    for rel in sorted(files, key=_file_order):
        lang = next((v for k, v in _FENCE.items() if rel.endswith(k)), "")
        parts.append(f"### {rel}\n\n```{lang}\n{files[rel].rstrip()}\n```")
    return "\n\n".join(parts)


def render_candidate(candidate: Candidate) -> str:
    return render_files(candidate.files)


def render_list(items: Sequence[str]) -> str:
    return "\n".join(f"- {i.strip()}" for i in items if i and i.strip())


def _file_order(rel: str) -> tuple[int, str]:
    # kernel.cu first: it is what the reader cares about; the glue second.
    return ({"kernel.cu": 0, "binding.cpp": 1}.get(rel, 2), rel)
