"""Fresh inputs for every call, the judge's side: which argument tensors get fresh values and how strongly, and
the reference of a checked call for exactly the inputs it was given.

A content-keyed cache (a dict keyed on a hash of the inputs, a C++ static, a `__device__` buffer keyed on a
device-side checksum) hit on almost every timed call while the timing loop rotated among a few variants: every
output was correct and the speedup 20 times the honest kernel's (H200). Now the timing helper gives every call
(checked, warm-up, timed) its variant times per-element factors drawn from the call's own seed, drawn after the
previous call returned (engine/pipeline/timer/kernel.cu), outside the timed region; the signed ITER record carries
the seed. No call sees content an earlier call saw, so an exact cache never hits; a fuzzy one (keyed on what the
factors leave alone: shapes, signs) returns another call's output, and the factors' spread is chosen per config so
that any two calls' references differ beyond the tolerance (four times over, on variant 0): that stale output fails
the checked iteration. Where no spread separates two calls (a reference that barely moves with its inputs: a mean
over a billion elements), the config says so (`separated` false) and the physical floor is what remains.

Modes keep what a problem's own get_inputs promises: signs and zeros (positive inputs to a log, triangular
matrices) under scaling by 1 +- alpha, symmetry (the factor drawn per unordered pair), a tensor of signs stays one
(+-1 targets get random signs), and a floating-point tensor of 0s and 1s (a mask) is kept as it is.

Lazy imports: torch and numpy, inside the functions (the judge loads torch after its runner is spawned).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from engine.pipeline.judge.configs import seeded
from engine.pipeline.judge.exact import ExactReferences, Opinion
from engine.pipeline.judge.parking import loaded
from engine.pipeline.protocol import wire

if TYPE_CHECKING:
    from engine.harness.runtimes.base import TaskRuntime
    from engine.pipeline.judge.analysis import Tolerance
    from engine.pipeline.judge.configs import Prepared

KEEP, SCALE, SYMMETRIC, SIGN = 0, 1, 2, 3
ALPHAS = (1 / 16, 1 / 4, 1 / 2)   # the factors' spread (1 +- alpha), weakest first; powers of two (kernel.cu)
MARGIN = 4.0                      # two calls' references must differ beyond MARGIN x the tolerance
PROBE_SEEDS = (0x5EED_0001, 0x5EED_0002)
CHUNK = 1 << 24                   # elements `separated` compares at a time (its temporaries: a few x 64 MiB)

# (tensors, seed, modes, alphas) -> the call's tensors: the helper's fresh_args in the judge, `emulated` elsewhere
Rebuild = Callable[[list[Any], int, tuple[int, ...], tuple[float, ...]], list[Any]]


@dataclass(frozen=True)
class Fresh:
    """How a config's calls get fresh inputs: a mode per argument tensor of a variant (wire order) and the spread."""
    modes: tuple[int, ...] = ()
    alpha: float = 0.0
    separated: bool = False   # two calls' references differ beyond MARGIN x the tolerance
    why: str = ""             # where not, or where nothing could be fresh: why

    @property
    def alphas(self) -> tuple[float, ...]:
        return tuple(self.alpha if m else 0.0 for m in self.modes)

    @property
    def active(self) -> bool:
        return any(self.modes)

    def summary(self) -> dict[str, Any]:
        names = {KEEP: "kept", SCALE: "scaled", SYMMETRIC: "scaled symmetrically", SIGN: "random signs"}
        return {"alpha": self.alpha, "separated": self.separated, "tensors": [names[m] for m in self.modes],
                **({"why": self.why} if self.why else {})}


def modes_for(per_variant: Iterable[list[Any]], freshable: list[bool]) -> tuple[int, ...]:
    """Each argument tensor's mode, from the values every variant gives it (one variant's tensors at a time)."""
    traits: list[tuple[bool, ...]] | None = None
    for ts in per_variant:
        mine = [_traits(t) for t in ts]
        del ts   # one variant's tensors on the GPU at a time: this one goes before the next is brought over
        traits = mine if traits is None else [tuple(a and b for a, b in zip(x, y)) for x, y in zip(traits, mine)]
    modes = []
    for can, (floating, zero_one, signs, symmetric) in zip(freshable, traits or []):
        if not can or not floating or zero_one:   # not a float, or a mask or one-hot: its values are its meaning
            modes.append(KEEP)
        else:
            modes.append(SIGN if signs else SYMMETRIC if symmetric else SCALE)
    return tuple(modes)


def _traits(t: Any) -> tuple[bool, bool, bool, bool]:
    """(a floating-point tensor with elements, all 0 or 1, all -1, 0 or 1, symmetric in its last two dims)."""
    import torch
    if not (isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()):
        return False, False, False, False
    zero_one = bool(((t == 0) | (t == 1)).all())
    signs = zero_one or bool(((t == 1) | (t == -1) | (t == 0)).all())
    symmetric = t.dim() >= 2 and t.shape[-1] == t.shape[-2] and torch.equal(t, t.transpose(-1, -2))
    return True, zero_one, signs, symmetric


def emulated(tensors: list[Any], seed: int, modes: tuple[int, ...], alphas: tuple[float, ...]) -> list[Any]:
    """kernel.cu's factors in numpy and torch, bit for bit (tests, and the check of the helper's host path)."""
    import numpy as np
    import torch
    out = []
    for k, (t, mode, alpha) in enumerate(zip(tensors, modes, alphas)):
        if not mode or not t.is_floating_point() or t.dtype not in (torch.float32, torch.float16, torch.bfloat16,
                                                                   torch.float64) or not t.numel():
            out.append(t.clone())
            continue
        n = t.numel()
        i = np.arange(n, dtype=np.uint64)
        if mode == SYMMETRIC:
            side = np.uint64(t.shape[-1])
            plane = side * side
            b, r, c = i // plane, (i // side) % side, i % side
            i = b * plane + np.where(r < c, r * side + c, c * side + r)
        with np.errstate(over="ignore"):
            h = _splitmix((np.uint64(seed) + np.uint64(k) * np.uint64(0x9E3779B97F4A7C15)) + i)
        if mode == SIGN:
            factor = np.where(h & np.uint64(1), np.float32(-1), np.float32(1)).astype(np.float32)
        else:
            u = (h >> np.uint64(40)).astype(np.float32) * np.float32(1 / 16777216) * np.float32(2) - np.float32(1)
            factor = np.float32(1) + np.float32(alpha) * u
        f = torch.from_numpy(factor).reshape(t.shape).to(t.device)
        flat = t.detach().contiguous()
        out.append(flat * f.double() if t.dtype == torch.float64 else (flat.float() * f).to(t.dtype))
    return out


def _splitmix(x: Any) -> Any:
    import numpy as np
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def reference_of(runtime: TaskRuntime, prep: Prepared, v: int, seed: int, fresh: Fresh, rebuild: Rebuild) -> tuple:
    """The reference of a call of variant `v` whose seed was `seed`: its arguments rebuilt as the helper built
    them, the reference computed for exactly those (seeded where the reference draws random numbers)."""
    return expected_of(runtime, prep, v, seed, fresh, rebuild)[0]


def expected_of(runtime: TaskRuntime, prep: Prepared, v: int, seed: int, fresh: Fresh, rebuild: Rebuild
                ) -> tuple[tuple, tuple]:
    """`reference_of`, and the arguments the reference changes in place (`prep.mutated`) as its call on exactly
    those arguments leaves them: what the candidate's call must leave in them."""
    if not fresh.active:
        with loaded(runtime, prep, v) as var:
            return tuple(var.ref), tuple(var.after)
    with loaded(runtime, prep, v, outputs=False) as var:   # its inputs only: the reference is computed anew
        tensors: list[Any] = []
        tree = wire.encode_args(tuple(var.plan.args), tensors)
        rebuilt = rebuild(tensors, seed, fresh.modes, fresh.alphas)
        args = tuple(wire.decode_args(tree, rebuilt))
        call_seed = var.plan.call_seed
        del tensors, var
        if runtime.composes_with_inputs:   # the task's composition reads the variant's own inputs meanwhile
            out = tuple(seeded(call_seed, lambda: runtime.fresh_reference(args)))
            return out, tuple(rebuilt[k] for k in prep.mutated)
    # the reference reads only the rebuilt arguments: the variant's copy on the GPU is gone before it runs
    out = tuple(seeded(call_seed, lambda: runtime.fresh_reference(args)))
    return out, tuple(rebuilt[k] for k in prep.mutated)


def choose(runtime: TaskRuntime, prep: Prepared, tol: Tolerance, rebuild: Rebuild) -> Fresh:
    """The weakest spread under which two calls of variant 0 have references that differ beyond MARGIN x the
    tolerance, each from the other and from the variant's own; the strongest, `separated` false, where none does."""
    with loaded(runtime, prep, 0, outputs=False) as var:
        tensors: list[Any] = []
        wire.encode_args(tuple(var.plan.args), tensors)
        freshable = runtime.freshable(tensors)
        del tensors
    modes = modes_for(_each_variants_tensors(runtime, prep), freshable)
    if not any(modes):
        return Fresh(modes, 0.0, False, "no argument can take fresh values (none is a floating-point input the "
                                        "task lets vary)")
    for alpha in ALPHAS:   # two references on the GPU at a time at most (a problem's outputs can take GBs)
        fresh = Fresh(modes, alpha, True)
        a = reference_of(runtime, prep, 0, PROBE_SEEDS[0], fresh, rebuild)
        if separated(a, tuple(prep.variants[0].ref), tol) and \
                separated(a, reference_of(runtime, prep, 0, PROBE_SEEDS[1], fresh, rebuild), tol):
            return fresh
        del a
    return Fresh(modes, ALPHAS[-1], False, f"two calls' references stay within {MARGIN:g}x the tolerance even with "
                                           f"factors of 1 +- {ALPHAS[-1]:g}: the reference barely moves with its inputs")


def _each_variants_tensors(runtime: TaskRuntime, prep: Prepared) -> Iterator[list[Any]]:
    """Each variant's argument tensors on the GPU, one variant at a time."""
    for v in range(len(prep.variants)):
        with loaded(runtime, prep, v, outputs=False) as var:
            ts: list[Any] = []
            wire.encode_args(tuple(var.plan.args), ts)
            yield ts
            del ts   # not held while the next variant is brought over


def separated(a: tuple, b: tuple, tol: Tolerance) -> bool:
    """Whether `a`, offered where `b` is the reference, misses MARGIN x the tolerance on more elements of some output
    than the task's mismatch budget allows (or differs in shape): any comparison at the task's own tolerance then
    fails it too (engine/harness/compare.py)."""
    import torch
    for x, y in zip(a, b):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            if x != y and abs(float(x) - float(y)) > MARGIN * (tol.atol + tol.rtol * abs(float(y))):
                return True
            continue
        if x.shape != y.shape:
            return True
        if not x.numel():
            continue
        if not x.is_floating_point():
            if not torch.equal(x, y):
                return True
            continue
        if _misses(x, y, tol) > tol.budget * x.numel():
            return True
    return False


def _misses(x: Any, y: Any, tol: Tolerance) -> int:
    """How many elements of `x` miss `y` by more than MARGIN x the tolerance, CHUNK elements at a time: isclose's
    temporaries are several times what it compares (a 4 GiB output took the judge to seven times its footprint),
    and `y` may be parked in host memory (each chunk comes to `x`'s device as it is compared)."""
    import torch
    xs, ys = x.reshape(-1), y.reshape(-1)
    missed = 0
    for i in range(0, xs.numel(), CHUNK):
        a = xs[i:i + CHUNK]
        b = ys[i:i + CHUNK].to(device=a.device, dtype=a.dtype)
        missed += int((~torch.isclose(a, b, rtol=MARGIN * tol.rtol, atol=MARGIN * tol.atol, equal_nan=True)).sum())
    return missed


class FreshReferences:
    """Each checked call's reference for exactly the inputs it was given (`reference_of`), the values the reference
    leaves in the arguments it changes in place (`expected_of`), and the float64 second opinion on a call that misses
    it (`opinion`): the References the judge's digests and judgements read (engine/pipeline/judge/digest.py)."""

    def __init__(self, runtime: TaskRuntime, prep: Prepared, rebuild: Rebuild, float64: bool = True):
        self.runtime, self.prep, self.rebuild = runtime, prep, rebuild
        self.exact = ExactReferences(runtime, prep) if float64 else None

    def __len__(self) -> int:
        return len(self.prep.variants)

    def opinion(self, call: Any) -> Opinion | None:
        """The judge's second opinion on a miss of this call's reference (engine/pipeline/judge/exact.py); None where
        the request asks for none (the upstream mode)."""
        if self.exact is None:
            return None
        fresh = self.prep.fresh or Fresh()
        if not fresh.active:
            return self.exact.opinion(call.variant, None)
        return self.exact.opinion(call.variant, lambda ts: self.rebuild(ts, call.seed, fresh.modes, fresh.alphas))

    @property
    def mutated(self) -> tuple[int, ...]:
        return self.prep.mutated

    def for_call(self, call: Any) -> tuple:
        return self.expected(call)[0]

    def expected(self, call: Any) -> tuple[tuple, tuple]:
        return expected_of(self.runtime, self.prep, call.variant, call.seed, self.prep.fresh or Fresh(), self.rebuild)
