"""Task filter: find configs whose reference outputs are degenerate, so a trivial kernel could pass them.

For each direction, config and seed the reference runs (the reference is trusted code, so this runs in
process: on the GPU when one is visible, otherwise on the CPU for the configs small enough). A config is
degenerate when a trivial output passes the task's own comparison (same tolerances and mismatch budget):

- `zero`: all zeros passes;
- `constant`: a constant (the reference output's mean) passes;
- `input-insensitive`: the output for other inputs (same parameters) passes;
- `init-insensitive`: the output for other parameters (same inputs) passes; only where the seed changes
  the model's floating-point parameters or buffers;
- `identity`: an input of the output's shape and dtype, copied as that output, passes (a near-identity op on
  these inputs: "copy the input to the output", a public reward-hack family).

For a backward, `input-insensitive` compares whole setups (inputs, parameters and grad_out all redrawn).


Warnings (reported, not degenerate): `vacuous tolerance` (below) and `too tight`: the float64 reference,
rounded to the task's dtype, fails the comparison, so a kernel more accurate than eager misses the task-dtype
reference. The judge then takes its float64 second opinion (engine/pipeline/judge/exact.py), one more reference per
such call; the upstream mode takes none, and rejects such a kernel as upstream would.

Statistics reported per config (worst over seeds and outputs): std, fraction of elements with |y| <= atol,
relative change of the output with the inputs and with the initialisation, the fraction of nonzero
reference values for which 0 is within atol + rtol*|y| (`vacuous`; at 0.5 and above only the scale-aware
checks of engine.harness.compare judge the config, which the report says), and the task dtype's own error
against a float64 run of the reference (`ref_error`: ||y - y64|| / ||y64||, what a tolerance derived from
the reference would start from).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch

from engine.errors import TaskError
from engine.harness.compare import Comparison, compare_outputs, reference_error, vacuous_fraction
from engine.harness.cost_count import counted_cost
from engine.harness.runtimes import runtime_for

if TYPE_CHECKING:
    from engine.harness.runtimes.base import TaskRuntime
    from engine.tasks.model import DirectionSpec, Task, TaskConfig

# torch is imported inside the functions that use it (start-up cost): importing this module does not load it.
# Configs above these run only on a GPU (CPU is the fallback for small ones). A CPU check's time goes mostly to
# comparing outputs (five comparisons per seed, each several float64 passes: about 2 us per element on 2 cores),
# so the bytes bound is one of time as much as of memory: 1e8 bytes (25M float32 values in and out) is about
# 20 s per seed there; a 4096x4096 elementwise config (134 MB) took 70 s per seed and 352 s in all before.
CPU_MAX_FLOPS = 3e9
CPU_MAX_BYTES = 1e8
CPU_SEED_BUDGET_S = 20.0   # on a CPU, a config whose first seed took longer is checked on that seed alone


@dataclass
class ConfigCheck:
    direction: str
    config: str
    device: str
    seeds: int = 0
    skipped: str = ""
    flags: list[str] = field(default_factory=list)
    std: float | None = None
    frac_near_zero: float | None = None
    input_sensitivity: float | None = None   # ||f(x') - f(x)|| / ||f(x)||, same parameters
    init_sensitivity: float | None = None    # ||f_θ'(x) - f_θ(x)|| / ||f_θ(x)||, same inputs (None: no parameters)
    vacuous: float | None = None             # fraction of nonzero reference values for which 0 passes atol/rtol
    ref_error: float | None = None           # ||y - y64|| / ||y64||: the task dtype's own error (None: no float64 run)
    warnings: list[str] = field(default_factory=list)
    error: str = ""                          # the reference raised: the config was not checked (the task is broken)

    @property
    def checked(self) -> bool:
        return not self.skipped and not self.error

    @property
    def degenerate(self) -> bool:
        return bool(self.flags)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "degenerate": self.degenerate}


def _floats(outs: Any) -> list[Any]:
    return [t.detach() for t in outs if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _rel(a: list[Any], b: list[Any]) -> float:
    num = sum(float(torch.linalg.vector_norm((x.double() - y.double()).nan_to_num())) for x, y in zip(a, b))
    den = sum(float(torch.linalg.vector_norm(y.double().nan_to_num())) for y in b)
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def _compare(trial: list[Any], ref: list[Any], spec: DirectionSpec) -> Comparison:
    return compare_outputs(tuple(trial), tuple(ref), spec.tolerance.atol, spec.tolerance.rtol,
                           spec.max_mismatch_fraction)


def _passes(trial: list[Any], ref: list[Any], spec: DirectionSpec) -> bool:
    return _compare(trial, ref, spec).ok


def _param_state(runtime: TaskRuntime) -> list[Any]:
    """The model's floating-point parameters and buffers (empty when it has none)."""
    model = getattr(runtime, "model", None)
    if model is None or not hasattr(model, "state_dict"):
        return []
    return [t.detach().clone() for t in model.state_dict().values()
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()]


def _changed(a: list[Any], b: list[Any]) -> bool:
    return len(a) != len(b) or any(x.shape != y.shape or not torch.equal(x, y) for x, y in zip(a, b))


def _reference64(runtime: TaskRuntime, config: TaskConfig, seed: int, device: Any) -> list[Any] | None:
    """The reference in float64 on the same seeded setup (model, inputs and grad_out converted), or None
    where the reference cannot run in float64 (it fixes a dtype somewhere, say)."""
    def up(t: Any) -> Any:
        return t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
    try:
        with torch.no_grad():
            runtime.setup(config, seed, device)
        model = getattr(runtime, "model", None)
        if model is not None and hasattr(model, "double"):
            model.double()
        if isinstance(getattr(runtime, "grad_out", None), torch.Tensor):
            runtime.grad_out = up(runtime.grad_out)
        out = _floats(runtime.reference([up(t) for t in runtime.inputs()]))
        return out if out and all(t.dtype == torch.float64 for t in out) else None
    except Exception:  # noqa: BLE001 - float64 is a bonus: the dtype run is the check
        return None


def _copied_inputs_pass(runtime: TaskRuntime, config: TaskConfig, seed: int, device: Any, drawn: list[Any],
                        ref: list[Any], spec: DirectionSpec) -> set[str]:
    """`identity` flags: each output for which an argument of its shape and dtype (`drawn`: the call's arguments),
    copied in its place, passes the comparison. Where one matches, the arguments are drawn again from the same
    seed: the reference may have changed its own in place."""
    pairs = [(i, j) for i, out in enumerate(ref) for j, x in enumerate(drawn)
             if isinstance(x, torch.Tensor) and (x.shape, x.dtype) == (out.shape, out.dtype)]
    if not pairs:
        return set()
    with torch.no_grad():
        runtime.setup(config, seed, device)
    given = runtime.inputs()
    found: dict[int, str] = {}
    for i, j in pairs:
        if i not in found and _passes([given[j].detach() if n == i else t for n, t in enumerate(ref)], ref, spec):
            found[i] = f"identity: argument {j} copied as output {i} passes the comparison"
    return set(found.values())


def check_config(runtime: TaskRuntime, config: TaskConfig, device: Any, seeds: int = 3,
                 seed_budget_s: float | None = None) -> ConfigCheck:
    """`seed_budget_s`: where the first seed takes longer, the check stops after it and says so in a warning
    (the shrink that keeps a CPU check of a config that passed the size guard within a minute or so)."""
    spec = runtime.spec
    res = ConfigCheck(runtime.direction, config.name, str(device), seeds)
    atol = spec.tolerance.atol
    stds, nz, sens_in, sens_init, vac, errs = [], [], [], [], [], []
    tight: set[str] = set()
    flags: set[str] = set()
    started = time.monotonic()
    for k in range(seeds):
        if k == 1 and seed_budget_s is not None and (took := time.monotonic() - started) > seed_budget_s:
            res.seeds = 1
            res.warnings.append(f"checked on 1 of {seeds} seeds: one seed took {took:.0f} s on {device} (over "
                                f"{seed_budget_s:.0f} s; run on a GPU, or pass --cpu-all, for every seed)")
            break
        s1, s2 = config.seed * 7717 + 2 * k + 1, config.seed * 7717 + 2 * k + 2
        with torch.no_grad():
            runtime.setup(config, s1, device)
        x1 = runtime.inputs()
        a = _floats(runtime.reference(x1))                       # θ1, x1
        state1 = _param_state(runtime)
        with torch.no_grad():
            runtime.setup(config, s2, device)
        # Init sensitivity only means something where the seed changes the parameters (rotary's tables
        # are fixed by the config, for instance).
        params = _changed(state1, _param_state(runtime))
        b = _floats(runtime.reference(x1))                       # θ2, x1
        c = _floats(runtime.reference(runtime.inputs()))         # θ2, x2
        if not a:
            res.skipped = "no floating-point output"
            return res
        for t in a:
            v = t.double()
            if t.numel() > 1:
                stds.append(float(v.std()))
            nz.append(float((v.abs() <= atol).double().mean()) if t.numel() else 1.0)
        # A backward's inputs include grad_out, which the setup draws per seed: compare whole setups there
        # (a linear op's gradient does not depend on x, only on grad_out).
        in_pair = (c, a) if runtime.direction == "backward" else (c, b)
        sens_in.append(_rel(*in_pair))
        if params:
            sens_init.append(_rel(b, a))
        if _passes([torch.zeros_like(t) for t in a], a, spec):
            flags.add("zero: an all-zero output passes the comparison")
        # (a one-element output is its own mean: its constancy across inputs is the input-insensitive check)
        if any(t.numel() > 1 for t in a) and \
                _passes([torch.full_like(t, float(t.double().nan_to_num().mean())) for t in a], a, spec):
            flags.add("constant: a constant output (the mean) passes the comparison")
        if _passes(in_pair[1], in_pair[0], spec):
            flags.add("input-insensitive: the output for other inputs passes the comparison")
        if params and _passes(a, b, spec):
            flags.add("init-insensitive: the output for other parameters/initialisation passes the comparison")
        if k == 0:
            flags.update(_copied_inputs_pass(runtime, config, s1, device, x1, a, spec))
        vac.append(max(vacuous_fraction(t, atol, spec.tolerance.rtol) for t in a))
        a64 = _reference64(runtime, config, s1, device)
        if a64 is not None and len(a64) == len(a):
            errs.append(max(reference_error(t, t64) for t, t64 in zip(a, a64)))
            honest = _compare([t64.to(t.dtype) for t, t64 in zip(a, a64)], a, spec)
            if not honest.ok:
                tight.add(f"too tight: the float64 reference, rounded to {a[0].dtype}, fails the task's own "
                          f"comparison ({honest.reason[:200]}): a kernel more accurate than eager misses it, and "
                          "passes only on the judge's float64 second opinion (never in the upstream mode)")
    res.std = min(stds) if stds else None
    res.frac_near_zero = max(nz) if nz else None
    res.input_sensitivity = min(sens_in) if sens_in else None
    res.init_sensitivity = min(sens_init) if sens_init else None
    res.vacuous = max(vac) if vac else None
    res.ref_error = max(errs) if errs else None
    if res.vacuous is not None and res.vacuous >= 0.5:
        res.warnings.append(f"vacuous tolerance: 0 is within atol={atol:g} (rtol={spec.tolerance.rtol:g}) for "
                            f"{res.vacuous:.0%} of the reference's nonzero values; only the scale-aware checks "
                            "(dead rows, normalised error) judge this config")
    res.warnings += sorted(tight)   # after a shrink's warning, which came first
    res.flags = sorted(flags)
    return res


def _counted(runtime: TaskRuntime, config: TaskConfig) -> tuple[float, int] | None:
    """(FLOPs, bytes) of one call of the reference, counted on the meta device; None where it cannot be built
    there (FLOPs 0 where only its setup could be)."""
    counted = counted_cost(runtime, config)
    return (float(counted.cost.flops), int(counted.cost.bytes)) if counted is not None else None


def footprint_bytes(runtime: TaskRuntime, config: TaskConfig) -> int | None:
    """What one setup of `config` holds (inputs, parameters and buffers, reference outputs), measured on torch's
    `meta` device, which allocates nothing (engine/harness/cost_count.py). None where the reference cannot be built
    there. The size guard for configs without a cost model (imported KernelBench problems): a problem's
    `get_inputs` may draw tens of GB, which a CPU check would try to allocate until the OOM killer came."""
    counted = counted_cost(runtime, config)
    return int(counted.cost.bytes) if counted is not None else None


def _too_large_on_cpu(runtime: TaskRuntime, cfg: TaskConfig, direction: str) -> str:
    """Why `cfg` is not checked on a CPU ("" where it is): its cost model, else its measured footprint."""
    cost = cfg.cost.get(direction)
    if cost is not None:
        if cost.flops > CPU_MAX_FLOPS or cost.bytes > CPU_MAX_BYTES:
            return (f"too large for the CPU check: {cost.bytes / 1e9:.2f} GB moved and {cost.flops / 1e9:.3g} GFLOP "
                    "per call by its cost model, and the check makes a dozen calls and more (run on a GPU, or "
                    "pass --cpu-all)")
        return ""
    counted = _counted(runtime, cfg)
    if counted is None:
        return ""
    flops, held = counted
    if held > CPU_MAX_BYTES:
        return (f"too large for the CPU check: one setup holds {held / 1e9:.2f} GB of inputs, parameters and "
                "outputs, and the check builds several (run on a GPU, or pass --cpu-all)")
    if flops > CPU_MAX_FLOPS:
        return (f"too slow for the CPU check: one call of the reference is {flops / 1e9:.0f} GFLOP (counted), and "
                "the check makes a dozen and more (run on a GPU, or pass --cpu-all)")
    return ""


def check_task(task: Task, seeds: int = 3, device: str | None = None, directions: list[str] | None = None,
               configs: list[str] | None = None, cpu_all: bool = False,
               progress: Callable[[str], None] | None = None) -> list[ConfigCheck]:
    """Check every (direction, config) of `task`; small configs only on a CPU unless cpu_all (by cost model or
    counted FLOPs and bytes; a config whose first seed still takes over CPU_SEED_BUDGET_S is checked on that seed
    alone, with a warning). A reference that cannot even be imported is bad input (TaskError naming the file and
    the cause)."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    out: list[ConfigCheck] = []
    for direction in directions or list(task.directions):
        try:
            runtime = runtime_for(task, direction)
        except Exception as exc:  # noqa: BLE001 - the task's own code failed to load
            ref = task.spec(direction).reference_path
            raise TaskError(f"{ref}: the reference cannot be imported ({type(exc).__name__}: {exc}). "
                            "Install what it needs into kbench's Python, or fix the file.") from None
        if dev.type == "cpu" and not cpu_all and progress:
            progress(f"{task.name} {direction}: sizing its configs for the CPU (FLOPs and bytes on the meta device)")
        for cfg in task.configs:
            if configs and cfg.name not in configs:
                continue
            why = _too_large_on_cpu(runtime, cfg, direction) if dev.type == "cpu" and not cpu_all else ""
            if why:
                out.append(ConfigCheck(direction, cfg.name, str(dev), 0, skipped=why))
                continue
            if progress:
                progress(f"{task.name} {direction} {cfg.name} on {dev}")
            try:
                budget = CPU_SEED_BUDGET_S if dev.type == "cpu" and not cpu_all else None
                out.append(check_config(runtime, cfg, dev, seeds, seed_budget_s=budget))
            except Exception as exc:  # noqa: BLE001 - a broken reference is reported, not raised
                out.append(ConfigCheck(direction, cfg.name, str(dev), 0,
                                       error=f"the reference raised {type(exc).__name__}: {str(exc)[:300]}"))
    return out
