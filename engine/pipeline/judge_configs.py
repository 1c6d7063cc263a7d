"""A config as the judge prepares it: each variant's inputs built from its seed with the task's own code, the
reference outputs, and the `config` message that ships the candidate's exact arguments to the runner.

Lazy imports: torch, inside the functions. The judge spawns its runner before it loads torch, so both
import it at once (engine/pipeline/judge.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from engine.pipeline import messages as msg
from engine.pipeline import wire

if TYPE_CHECKING:
    from engine.harness.runtimes.base import CallPlan, TaskRuntime
    from engine.tasks.model import TaskConfig


@dataclass
class Variant:
    seed: int
    state: dict[str, Any]
    plan: CallPlan
    ref: tuple


@dataclass
class Prepared:
    name: str
    variants: list[Variant]
    tensors: list[Any] = field(default_factory=list)   # the judge's copy of every variant's argument tensors


def prepare(runtime: TaskRuntime, cfg: TaskConfig, trials: int, device: Any) -> Prepared:
    """Set each variant up under its seed, capture how the candidate is called, compute the reference."""
    import torch
    variants: list[Variant] = []
    base_seed = cfg.seed * 1000
    for t in range(max(trials, 2)):
        seed = base_seed + t
        if t and runtime.shares_model_across_variants:
            runtime.reseed_inputs(cfg, seed, device)
        else:
            runtime.setup(cfg, seed, device)
        plan = runtime.call_plan(runtime.inputs())
        ref = tuple(x.detach().clone() if isinstance(x, torch.Tensor) else x
                    for x in runtime.reference(runtime.inputs()))
        variants.append(Variant(seed, runtime.save_state(), plan, ref))
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    return Prepared(cfg.name, variants)


def plan_message(prep: Prepared) -> tuple[msg.Config, list[Any]]:
    """The `config` message: variant 0's argument tree, every variant's tensors, the model for ModelNew."""
    trees, per_variant = [], []
    for v in prep.variants:
        ts: list[Any] = []
        trees.append(wire.encode_args(tuple(v.plan.args), ts))
        per_variant.append(ts)
    if any(t != trees[0] for t in trees[1:]) or len({len(ts) for ts in per_variant}) != 1:
        # arguments beyond tensors differ between seeds: rotate nothing, use the first variant only
        per_variant, trees = per_variant[:1], trees[:1]
        prep.variants = prep.variants[:1]
    shapes = [[(t.shape, t.dtype) for t in ts] for ts in per_variant]
    if any(s != shapes[0] for s in shapes[1:]):
        per_variant, prep.variants = per_variant[:1], prep.variants[:1]
    tensors = [t for ts in per_variant for t in ts]
    plan = prep.variants[0].plan
    model: dict[str, Any] | None = None
    if plan.kind == "modelnew":
        state_tensors: list[Any] = []
        init = wire.encode_args(tuple(plan.model_init), state_tensors)
        state = {}
        for name, t in (plan.model_state or {}).items():
            state[name] = len(state_tensors)
            state_tensors.append(t)
        model = {"seed": plan.model_seed, "init": init, "state": state, "dtype": plan.model_dtype}
        tensors += state_tensors
    prep.tensors = [t for ts in per_variant for t in ts]
    config = msg.Config(cid=prep.name, kind=plan.kind, entry=plan.entry, args=trees[0], variants=len(per_variant),
                        per_variant=len(per_variant[0]), model=model)
    return config, tensors


def footprint(prep: Prepared) -> int:
    """Bytes of one variant of a config, each storage once: its argument tensors (what the runner gets per
    variant), the model's weights (a KernelBench model's state) and the reference outputs. What the judge's and the
    runner's memory for the config is measured against."""
    import torch
    v = prep.variants[0]
    tensors: list[Any] = []
    wire.encode_args(tuple(v.plan.args), tensors)
    tensors += list((v.plan.model_state or {}).values()) + list(v.ref)
    storages = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.numel():
            storages[(t.device, t.untyped_storage().data_ptr())] = t.untyped_storage().nbytes()
    return sum(storages.values())


def reference_outputs(prep: Prepared) -> list[tuple[tuple[int, ...], Any] | None]:
    """The reference's outputs as (shape, dtype), None for one that is no tensor: what a correct candidate returns."""
    import torch
    return [(tuple(r.shape), r.dtype) if isinstance(r, torch.Tensor) else None for r in prep.variants[0].ref]


def composer(runtime: TaskRuntime, prep: Prepared) -> Callable[[int, list[Any]], tuple]:
    """Variant v's outputs as the reference's tuple: the runtime composes them under that variant's state."""
    def compose(v: int, outputs: list[Any]) -> tuple:
        runtime.restore_state(prep.variants[v].state)
        return runtime.compose(runtime.inputs(), outputs)
    return compose
