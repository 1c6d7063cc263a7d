"""Task and candidate facts rendered as prompt text: the values the templates' placeholders take."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from engine.candidates import Candidate
from engine.config.env import cache_root
from engine.harness.roofline import Peaks, load_peaks
from engine.tasks.glue.abi import GlueError
from engine.tasks.glue.generated import glue_header, glue_triton_skeleton
from engine.tasks.model import DTYPE_BYTES, Task, default_timing_configs, scaled
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


def context_values(task: Task, direction: str, target: str = "", languages: Sequence[str] = ("cuda",)
                   ) -> dict[str, Any]:
    """Placeholder values for context.md: the stable, cached part of every prompt about this task."""
    spec = task.spec(direction)
    try:
        reference = spec.reference_path.read_text().rstrip()
    except OSError as exc:
        reference = f"# (reference unreadable: {exc.strerror or type(exc).__name__})"   # no path of the user's
    fn_name = "Model.forward" if task.format == "kernelbench" else "forward_fn"
    if direction == "backward":
        fn_name = f"the gradient of {fn_name}"
    return {
        "task_name": task.name, "direction": direction, "description": task.description or "(no description)",
        "dtype": task.dtype, "signature": spec.signature, "atol": f"{spec.tolerance.atol:g}",
        "rtol": f"{spec.tolerance.rtol:g}", "reference": reference, "fn_name": fn_name,
        "configs": render_configs(task), "init_schemes": render_inits(task),
        "backward_contract": _backward_contract(task) if direction == "backward" else "",
        "target": target, "launcher_abi": launcher_abi_text(task, direction) if "cuda" in languages else "",
        "triton_skeleton": triton_skeleton_text(task, direction) if "triton" in languages else "",
        "cost_model": render_cost_model(task, direction),
    }


def launcher_abi_text(task: Task, direction: str) -> str:
    """The launcher a kernel-only answer defines (engine/tasks/glue/generated.py); "" where the signature has no
    generated glue (then every answer carries its binding.cpp)."""
    try:
        return glue_header(task, direction).rstrip()
    except GlueError:
        return ""


def triton_skeleton_text(task: Task, direction: str) -> str:
    """The kernel.py skeleton a Triton answer fills in (engine/tasks/glue/triton.py); "" where the signature has no
    generated glue (then no Triton answer can run on the task)."""
    try:
        return glue_triton_skeleton(task, direction).rstrip()
    except GlueError:
        return ""


def render_inits(task: Task) -> str:
    used = dict.fromkeys(c.init for c in task.configs)
    return "\n".join(f"- `{name}`: {INIT_MEANINGS.get(name, 'see engine/tasks/inits.py')}" for name in used)


def render_timings(measurement: Measurement | None, task: Task | None = None, direction: str = "forward",
                   judged: dict[str, Any] | None = None) -> str:
    """Per-config times of a measurement (engine.workspace.Measurement) against eager and torch.compile, and
    against the physical floor: the judge's where its timing verdict placed them (`judged`: that verdict's
    data), else the task's cost model on the roofline cached for the measuring GPU (engine.harness.roofline)."""
    if measurement is None or not measurement.configs:
        return ""
    judged = judged or {}
    peaks = _peaks(judged.get("peaks"), measurement.gpu)
    costs = {c.name: c.cost.get(direction) for c in task.configs} if task is not None else {}
    lines = ["| config | candidate ms | physical floor ms | of the roofline | eager ms | vs eager | torch.compile ms "
             "| vs compile |", "|---|---|---|---|---|---|---|---|"]
    for c in measurement.configs:
        def f(x: Any, fmt: str) -> str:
            return format(x, fmt) if x is not None else "-"
        floor = (judged.get("configs") or {}).get(c.config, {}).get("floor_ms")
        cost = costs.get(c.config)
        if floor is None and peaks is not None and cost is not None:
            floor = peaks.floor_ms(cost)
        bound = f" ({peaks.bound(cost)}-bound)" if peaks is not None and cost is not None else ""
        share = f"{floor / c.ms:.0%}{bound}" if floor and c.ms else "-"
        lines.append(f"| {c.config} | {f(c.ms, '.4f')} | {f(floor, '.4f')} | {share} | {f(c.eager_ms, '.4f')} | "
                     f"{f(c.speedup_eager, '.2f')}x | {f(c.compile_ms, '.4f')} | {f(c.speedup_compile, '.2f')}x |")
    where = f" on {measurement.gpu}" if measurement.gpu else ""
    if peaks is not None:
        place = (f"The floor is the cost model's minimum bytes at the copy bandwidth or its FLOPs at the fp32-accurate "
                 f"rate, whichever takes longer, on this GPU's measured roofline ({describe_peaks(peaks)}).")
    else:
        place = (f"No roofline is measured for {measurement.gpu or 'that GPU'} here (`kbench roofline` on it "
                 "measures one), so these times are not placed against a physical floor.")
    return f"Measured{where}:\n\n" + "\n".join(lines) + "\n\n" + place


def describe_peaks(peaks: Peaks) -> str:
    ridge = peaks.fp32_accurate_tflops * 1e3 / peaks.copy_gbps
    return (f"copy {peaks.copy_gbps:.0f} GB/s; fp32 {peaks.fp32_tflops:.1f} TFLOP/s on the CUDA cores, tf32 "
            f"{peaks.tf32_tflops:.1f} TFLOP/s on the tensor cores (fp32-accurate 3xTF32 at most "
            f"{peaks.tf32_tflops / 3:.1f}); ridge point {ridge:.1f} FLOP/byte at fp32 accuracy")


def _peaks(judged: Any, gpu: str) -> Peaks | None:
    """The peaks the judge placed the times with, else those cached on this machine for `gpu`."""
    if isinstance(judged, dict):
        try:
            return Peaks(gpu=str(judged["gpu"]), copy_gbps=float(judged["copy_gbps"]),
                         fp32_tflops=float(judged["fp32_tflops"]), tf32_tflops=float(judged["tf32_tflops"]),
                         measured_at=0.0)
        except (KeyError, TypeError, ValueError):
            pass
    return load_peaks(cache_root(), gpu) if gpu else None


def render_cost_model(task: Task, direction: str) -> str:
    """The task's cost model (its formulas) and each config's minimum work, for the context."""
    rows = [(c.name, c.cost[direction]) for c in task.configs if direction in c.cost]
    if not rows:
        return ""
    spec = task.spec(direction)
    lines = []
    if spec.cost_formulas:
        flops, moved = spec.cost_formulas
        lines.append(f"- FLOPs per call: `{flops}`; minimum bytes moved: `{moved}` (dtype_bytes = "
                     f"{DTYPE_BYTES.get(task.dtype, '?')})")
    for name, cost in rows:
        lines.append(f"- `{name}`: {scaled(cost.flops, 'FLOP')}, {scaled(cost.bytes, 'B')}, "
                     f"{cost.intensity:.2f} FLOP/byte")
    return "\n".join(lines)


def estimate_tokens(text: str) -> int:
    """A conservative token count for CUDA/C++ source (about 3 characters a token)."""
    return len(text) // 3 + 1


def _backward_contract(task: Task) -> str:
    # upstream's task-specific convention (robust-kbench folders, the built-in robust-kbench tasks), not kbench's
    # generic one
    if task.spec("backward").autograd_backward:
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
    return ({"kernel.cu": 0, "kernel.py": 0, "binding.cpp": 1, "binding.py": 1}.get(rel, 2), rel)
