"""What the judge keeps of a checked call once it has compared the call's outputs: the comparison with the
reference, whether a wrong output matches another variant's reference, whether it is constant, whether it misses
by no more than numerics do (`near`: then no hack is named for it), and a hash of its bytes for the
constant-across-seeds check. Where the reference mutates some of its arguments in place
(engine/pipeline/judge/configs.py: `mutations`), the values the candidate's call left in them are compared with
the reference's at the task's tolerance too, and a difference fails the call naming the argument. The outputs are
freed as soon as a call is digested, so the judge holds one call's outputs at a time instead of every checked
call's (a check job's four 6 GiB softmax outputs before: KernelBench level 1 problem 23).

A check job's calls are digested as their records arrive (the runner waits between calls anyway); a timing job's
checked outputs wait in host memory until the job has ended (engine/pipeline/judge/runner_link.py), so the judge's GPU
neither works nor holds them while the candidate is timed.

Lazy imports: torch, where outputs are compared and hashed: the parent reads analysis.py's hack names, which
import this module, without loading torch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.harness.compare import Comparison

if TYPE_CHECKING:
    from engine.pipeline.judge.analysis import Call, Tolerance
    from engine.pipeline.judge.exact import Opinion

Hasher = Callable[[Any], int]   # a contiguous tensor -> a hash of its bytes
# what a correctness verdict says of calls only the float64 reference took (engine/pipeline/judge/exact.py)
FLOAT64_NOTE = "within the tolerance of the reference computed in float64, not of the task-dtype reference"


@dataclass
class Digest:
    comparison: Comparison
    follows: bool = False          # this wrong output matches the previous call's reference (theirs differing)
    constant: bool = False         # every element one value where the reference's are not
    hashed: tuple = field(default_factory=tuple)       # per composed output: (shape, dtype, hash) or the scalar
    ref_hashed: tuple = field(default_factory=tuple)   # the same of the call's reference
    # wrong, but within fresh.MARGIN x the tolerance of its own reference on all but the mismatch budget: numerics
    # (a decision flip, a sum's order), which an output kept from another call of a separated config never is
    near: bool = False
    float64: bool = False          # right only against the reference in float64 (engine/pipeline/judge/exact.py)


class References:
    """The reference of each checked call: here its variant's (`refs[v]`, a list or engine/pipeline/judge/parking.py's
    ParkedRefs); the judge's fresh inputs give each call its own (engine/pipeline/judge/fresh.py, `FreshReferences`).
    `expected`: the reference and the arguments the reference changes in place (`mutated`), as it leaves them:
    none here."""
    mutated: tuple[int, ...] = ()

    def __init__(self, refs: Any):
        self.refs = refs

    def __len__(self) -> int:
        return len(self.refs)

    def for_call(self, call: Call) -> tuple:
        return tuple(self.refs[call.variant])

    def expected(self, call: Call) -> tuple[tuple, tuple]:
        return self.for_call(call), ()

    def opinion(self, call: Call) -> Opinion | None:
        """No second opinion: these references are fixed per variant (FreshReferences gives the float64 one)."""
        return None


def references(refs: Any) -> Any:
    """`refs` as References: a list of each variant's reference is wrapped, References pass as they are."""
    return refs if hasattr(refs, "for_call") else References(refs)


def host_hash(t: Any) -> int:
    """A hash of a tensor's bytes computed on the host (tests; the judge hashes on its GPU with its helper)."""
    import torch
    flat = t.detach().contiguous().reshape(-1)
    raw = flat.view(torch.uint8) if flat.numel() and flat.dtype != torch.bool else flat.to(torch.uint8)
    return int.from_bytes(hashlib.blake2b(raw.cpu().numpy().tobytes(), digest_size=8).digest(), "little")


def _hashed(x: Any, hasher: Hasher) -> Any:
    import torch
    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), str(x.dtype), hasher(x.detach().contiguous()) if x.numel() else 0)
    return ("nan",) if x != x else x


def constant(outs: Sequence[Any], refs: Sequence[Any]) -> bool:
    """Some floating-point output has every element equal while the reference's does not."""
    import torch
    for t, r in zip(outs, refs):
        if isinstance(t, torch.Tensor) and isinstance(r, torch.Tensor) and t.is_floating_point() and t.numel() > 1 \
                and r.shape == t.shape and bool((t == t.reshape(-1)[0]).all()) and not bool((r == r.reshape(-1)[0]).all()):
            return True
    return False


def digest_call(call: Call, ref: tuple, previous: tuple | None, compose: Callable[[int, list[Any]], tuple],
                tol: Tolerance, hasher: Hasher = host_hash, after: tuple = (), mutated: Sequence[int] = (),
                opinion: Opinion | None = None) -> Digest:
    """Compare a checked call's outputs (composed into what the task compares) with the reference for the inputs it
    was given, and the arguments the reference changes in place (`mutated`, wire order) as the call left them with
    `after`, the reference's; keep what the integrity checks need (`previous`: the previous call's reference, where
    a wrong output may have come from), and free the outputs. `opinion`: how a miss is judged again (the reference
    in float64, engine/pipeline/judge/exact.py)."""
    got = compose(call.variant, list(call.outputs or []))
    c = tol.compare(got, ref)
    float64 = not c.ok and opinion is not None and (second := opinion(got, ref, c, tol)).ok
    if float64:
        c = second
    near = False
    if not c.ok:
        # imported here: the parent imports this module (analysis.py's hack names); fresh's imports are the judge's
        from engine.pipeline.judge.fresh import separated
        near = len(got) == len(ref) and not separated(got, ref, tol)
    if c.ok and mutated:
        c = mutated_inputs(list(call.inputs_after or []), after, mutated, tol) or c
    call.inputs_after = None
    follows = False
    if not c.ok and previous is not None:
        previous = _beside(previous, ref)
        follows = tol.compare(got, previous).ok and not tol.compare(ref, previous).ok
    d = Digest(c, follows, constant(got, ref), tuple(_hashed(x, hasher) for x in got),
               tuple(_hashed(x, hasher) for x in ref), near, float64)
    call.digest, call.outputs = d, None
    return d


def mutated_inputs(got: list[Any], want: tuple, mutated: Sequence[int], tol: Tolerance) -> Comparison | None:
    """The first argument the reference changes in place whose value after the candidate's call differs from the
    reference's (at the task's tolerance, on values alone: its layout is the caller's), or None."""
    import torch
    if len(got) != len(mutated) or len(want) != len(mutated):
        return Comparison(False, f"{len(got)} argument(s) came back after the call where the reference changes "
                                 f"{len(mutated)} in place (inputs {', '.join(map(str, mutated))})")
    for k, g, w in zip(mutated, got, want):
        if isinstance(g, torch.Tensor) and isinstance(w, torch.Tensor):
            g, w = g.contiguous(), w.to(g.device).contiguous()
        c = tol.compare((g,), (w,))
        if not c.ok:
            c.reason = f"input {k} (mutated in place by the reference) differs after the call: " \
                       f"{c.reason.removeprefix('output: ')}"
            return c
    return None


def _beside(values: tuple, like: tuple) -> tuple:
    """`values` moved to the devices of `like` (a reference kept in host memory beside one on the GPU)."""
    import torch
    return tuple(x.to(y.device) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) else x
                 for x, y in zip(values, like))
