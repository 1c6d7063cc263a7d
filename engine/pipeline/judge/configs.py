"""A config as the judge prepares it: each variant's inputs built from its seed with the task's own code, the
reference outputs, the argument tensors the reference changes in place (with their values after its call), and the
`config` message that ships the candidate's exact arguments to the runner.

A reference may update an argument in place (robust-kbench's batchnorm: F.batch_norm in training mode updates
running_mean and running_var). The judge finds out itself: it runs the reference once more on copies of exactly the
arguments the candidate is given and compares them before and after (`mutations`). The candidate may, and must,
change those arguments too: the helper leaves them out of its mutation probe and sends their values after each
checked call, which are compared with the reference's (engine/pipeline/judge/digest.py). Any other argument it changes
is a failure as ever.

Lazy imports: torch, inside the functions. The judge spawns its runner before it loads torch, so both
import it at once (engine/pipeline/judge/main.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from engine.harness.cost_count import call_flops
from engine.pipeline.judge.parking import loaded, park
from engine.pipeline.protocol import messages as msg
from engine.pipeline.protocol import wire

if TYPE_CHECKING:
    from engine.harness.runtimes.base import CallPlan, TaskRuntime
    from engine.pipeline.judge.fresh import Fresh
    from engine.tasks.model import TaskConfig


CALL_SEED_SALT = 7_000_003   # keeps the calls' seeds apart from the draws of the inputs (variant_seed)


@dataclass
class Variant:
    seed: int
    state: dict[str, Any]
    plan: CallPlan
    ref: tuple
    parked: bool = False   # its tensors in host memory (engine/pipeline/judge/parking.py)
    after: tuple = ()      # the arguments the reference changes in place (Prepared.mutated), as its call leaves them


@dataclass
class Prepared:
    name: str
    variants: list[Variant]
    tensors: list[Any] = field(default_factory=list)   # the judge's copy of every variant's argument tensors
    fresh: Fresh | None = None   # how each call's inputs are made fresh (engine/pipeline/judge/fresh.py), once chosen
    flops: float = 0.0           # variant 0's reference, counted by torch's FlopCounterMode
    mutated: tuple[int, ...] = ()   # the argument tensors (wire order) the reference changes in place (`mutations`)


def prepare(runtime: TaskRuntime, cfg: TaskConfig, trials: int, device: Any,
            seeds: tuple[int, ...] | None = None, park_above: int = 0) -> Prepared:
    """Set each variant up under its seed, capture how the candidate is called, compute the reference.

    One copy of each variant's inputs is held: the call plan's arguments are the variant's own inputs (the judge
    never hands them to code that could change them; the runner gets their bytes). The reference runs on a copy
    (a reference may work in place on its input), and its outputs are kept as they come unless they share storage
    with what the variant keeps (an input returned as is, a weight). On a GPU, where the config's variants would
    hold more than `park_above` bytes of it (variant 0's times their number), each variant is parked in host memory
    once prepared (engine/pipeline/judge/parking.py) and the next one is drawn beside the models alone; a config that
    fits stays on the GPU, where the check reads it without a copy each way (parking llama_rmsnorm's 9 GiB of
    variants cost most of a `kbench eval`). `seeds`: the variants' seeds where the request fixes them (the upstream
    mode's, `upstream_trial_seeds`), else kbench's."""
    import torch
    gpu = torch.device(device).type == "cuda"
    variants: list[Variant] = []
    stochastic, flops = False, 0.0
    mutated: tuple[int, ...] = ()
    count = max(trials, 2)
    park_them = False
    for t in range(count):
        seed = seeds[t] if seeds else variant_seed(cfg, t)
        if t and runtime.shares_model_across_variants:
            runtime.reseed_inputs(cfg, seed, device)
        else:
            runtime.setup(cfg, seed, device)
        plan = runtime.call_plan(runtime.pristine())
        if t == 0:   # the task's cost model where it has none (engine/harness/cost_count.py)
            flops = call_flops(runtime)[0]
        out = runtime.reference(runtime.inputs())
        if t == 0:
            stochastic = _draws_random_numbers(runtime, out)
        if stochastic:
            plan = dataclasses.replace(plan, call_seed=CALL_SEED_SALT + seed)
            del out
            out = seeded(plan.call_seed, lambda: runtime.reference(runtime.inputs()))
        state = runtime.save_state()
        kept = storages([state, plan.args, plan.model_state])
        ref = tuple(x.detach().clone() if isinstance(x, torch.Tensor) and _storage_key(x) in kept
                    else x.detach() if isinstance(x, torch.Tensor) else x for x in out)
        del out
        after: tuple = ()
        if t == 0 or mutated:   # which arguments it changes, from variant 0; their values after, per variant
            changed, copies = mutations(runtime, plan)
            mutated = changed if t == 0 else mutated
            after = tuple(copies[k] for k in mutated)
            del copies
        variant = Variant(seed, state, plan, ref, after=after)
        if gpu and t == 0:
            park_them = count * held_bytes(Prepared(cfg.name, [variant]), "cuda") > park_above
        variants.append(park(runtime, variant) if park_them else variant)
        del variant, state, plan, ref, after
    if gpu:
        torch.cuda.synchronize()
    return Prepared(cfg.name, variants, flops=flops, mutated=mutated)


def mutations(runtime: TaskRuntime, plan: CallPlan) -> tuple[tuple[int, ...], list[Any]]:
    """The argument tensors (wire order) the reference changes in place, and copies of every argument tensor as the
    reference's call leaves them: the reference run once more on copies of exactly the arguments the candidate is
    given (seeded as its calls are). Where the reference cannot run on the call's own arguments (a robust-kbench
    backward), none: any change the candidate makes then fails it, as before the judge looked."""
    import torch
    tensors: list[Any] = []
    tree = wire.encode_args(tuple(plan.args), tensors)
    copies = [t.detach().clone() for t in tensors]
    try:
        seeded(plan.call_seed, lambda: runtime.fresh_reference(tuple(wire.decode_args(tree, copies))))
    except torch.OutOfMemoryError:
        raise   # the judge's own memory: judge.py weighs whose lack it was
    except Exception:  # noqa: BLE001 - not a verdict: the reference's own run (prepare) says what is wrong with it
        return (), copies
    return tuple(k for k, (a, b) in enumerate(zip(copies, tensors)) if not same_bytes(a, b)), copies


def same_bytes(a: Any, b: Any) -> bool:
    """Two tensors of one shape and dtype hold the same bytes (a NaN equals itself)."""
    import torch
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    x, y = a.detach().contiguous().reshape(-1), b.detach().to(a.device).contiguous().reshape(-1)
    if x.dtype.is_floating_point or x.dtype.is_complex:
        x, y = x.view(torch.uint8), y.view(torch.uint8)
    return bool(torch.equal(x, y))


def _draws_random_numbers(runtime: TaskRuntime, out: Any) -> bool:
    """Whether the reference gives another result on the same inputs (beyond the task's tolerance): it draws random
    numbers (KernelBench level 2 problems 66 and 83 keep a 0.2 dropout in training mode)."""
    from engine.harness.compare import compare_outputs
    again = runtime.reference(runtime.inputs())
    tol = runtime.spec.tolerance
    return not compare_outputs(tuple(out), tuple(again), tol.atol, tol.rtol, runtime.spec.max_mismatch_fraction).ok


def seeded(seed: int | None, call: Callable[[], Any]) -> Any:
    """`call()` right after seeding torch's generators with `seed` (as it is: None)."""
    import torch
    if seed is not None:
        torch.manual_seed(seed)
    return call()


def variant_seed(cfg: TaskConfig, t: int) -> int:
    """The seed of a config's variant `t`."""
    return cfg.seed * 1000 + t


def upstream_trial_seeds(n: int, first: int = 42) -> tuple[int, ...]:
    """The trials' seeds as robust-kbench and KernelBench derive them: torch's generator seeded with 42, then one
    randint(0, 2**32 - 1) per trial (robust-kbench's sandbox/correct_*_fn.py, KernelBench's
    run_and_check_correctness). Drawn from a generator of its own: the same sequence, the global one untouched."""
    import torch
    gen = torch.Generator().manual_seed(first)
    return tuple(int(torch.randint(0, 2**32 - 1, (1,), generator=gen).item()) for _ in range(n))


def prepare_baseline(runtime: TaskRuntime, cfg: TaskConfig, device: Any, call_seed: int | None = None,
                     seed: int | None = None) -> Prepared:
    """Variant 0 of a config set up again on the GPU, without a reference: what the baselines and the null loop run
    on once the candidate's timing has ended (Judge._time); `call_seed`: the variant's (a reference that draws
    random numbers); `seed`: variant 0's where the request fixes the seeds."""
    seed = variant_seed(cfg, 0) if seed is None else seed
    runtime.setup(cfg, seed, device)
    plan = runtime.call_plan(runtime.pristine())
    if call_seed is not None:
        plan = dataclasses.replace(plan, call_seed=call_seed)
    tensors: list[Any] = []
    wire.encode_args(tuple(plan.args), tensors)
    return Prepared(cfg.name, [Variant(seed, runtime.save_state(), plan, ())], tensors)


def _storage_key(t: Any) -> tuple[Any, int]:
    return t.device, t.untyped_storage().data_ptr()


def storages(value: Any) -> dict[tuple[Any, int], int]:
    """The distinct tensor storages `value` holds (tensors in lists, tuples, dicts, a module's parameters and
    buffers, an object's attributes, one level down): (device, address) -> bytes."""
    import torch
    found: dict[tuple[Any, int], int] = {}

    def walk(v: Any, depth: int) -> None:
        if isinstance(v, torch.Tensor):
            if v.numel() and not v.is_meta:
                found[_storage_key(v)] = v.untyped_storage().nbytes()
        elif isinstance(v, torch.nn.Module):
            for t in [*v.parameters(), *v.buffers()]:
                walk(t, depth)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x, depth)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x, depth)
        elif depth and hasattr(v, "__dict__") and not isinstance(v, type) and type(v).__module__ != "builtins" \
                and not type(v).__name__ == "module":
            for x in vars(v).values():
                walk(x, depth - 1)
    walk(value, 1)
    return found


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
    seeds = tuple(int(v.plan.call_seed) for v in prep.variants) if plan.call_seed is not None else None
    fresh = prep.fresh if prep.fresh is not None and prep.fresh.active else None
    config = msg.Config(cid=prep.name, kind=plan.kind, entry=plan.entry, args=trees[0], variants=len(per_variant),
                        per_variant=len(per_variant[0]), model=model, call_seeds=seeds,
                        fresh_modes=fresh.modes if fresh else None, fresh_alphas=fresh.alphas if fresh else None,
                        mutable_inputs=prep.mutated)
    return config, tensors


def footprint(prep: Prepared) -> int:
    """Bytes of one variant of a config, each storage once: its argument tensors (what the runner gets per
    variant), the model's weights (a KernelBench model's state), the reference outputs and the arguments the
    reference changes in place, as it leaves them. What the judge's and the runner's memory for the config is
    measured against."""
    v = prep.variants[0]
    tensors: list[Any] = []
    wire.encode_args(tuple(v.plan.args), tensors)
    return sum(storages([tensors, v.plan.model_state, v.ref, v.after]).values())


def held_bytes(prep: Prepared, device_type: str = "cuda") -> int:
    """Bytes the judge holds for a config on devices of `device_type`, each storage once: every variant's setup
    (inputs, model), call plan, reference outputs and arguments as the reference leaves them. The accounting
    behind the judge's memory figures, and what the CPU tests bound against the config's footprint."""
    found = storages([[(v.state, v.plan.args, v.plan.model_state, v.ref, v.after) for v in prep.variants],
                      prep.tensors])
    return sum(n for (device, _), n in found.items() if device.type == device_type)


def reference_outputs(prep: Prepared) -> list[tuple[tuple[int, ...], Any] | None]:
    """The reference's outputs as (shape, dtype), None for one that is no tensor: what a correct candidate returns,
    followed by the arguments the reference changes in place (their values come back after the outputs)."""
    import torch
    v = prep.variants[0]
    return [(tuple(r.shape), r.dtype) if isinstance(r, torch.Tensor) else None for r in (*v.ref, *v.after)]


def composer(runtime: TaskRuntime, prep: Prepared) -> Callable[[int, list[Any]], tuple]:
    """Variant v's outputs as the reference's tuple: the runtime composes them under that variant's state (brought
    to the GPU for the moment where the task's composition reads the inputs)."""
    def compose(v: int, outputs: list[Any]) -> tuple:
        if not runtime.composes_with_inputs:
            return runtime.compose([], outputs)
        with loaded(runtime, prep, v):
            return runtime.compose(runtime.inputs(), outputs)
    return compose
