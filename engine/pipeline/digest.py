"""What the judge keeps of a checked call once it has compared the call's outputs: the comparison with the
reference, whether a wrong output matches another variant's reference, whether it is constant, and a hash of its
bytes for the constant-across-seeds check. The outputs are freed as soon as a call is digested, so the judge
holds one call's outputs at a time instead of every checked call's (a check job's four 6 GiB softmax outputs
before: KernelBench level 1 problem 23).

A check job's calls are digested as their records arrive (the runner waits between calls anyway); a timing job's
checked outputs wait in host memory until the job has ended (engine/pipeline/judge_runner.py), so the judge's GPU
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
    from engine.pipeline.analysis import Call, Tolerance

Hasher = Callable[[Any], int]   # a contiguous tensor -> a hash of its bytes


@dataclass
class Digest:
    comparison: Comparison
    follows: int | None = None     # a variant whose reference this wrong output matches (theirs differing)
    constant: bool = False         # every element one value where the reference's are not
    hashed: tuple = field(default_factory=tuple)   # per composed output: (shape, dtype, hash) or the scalar


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


def digest_call(call: Call, refs: list[tuple], compose: Callable[[int, list[Any]], tuple], tol: Tolerance,
                hasher: Hasher = host_hash) -> Digest:
    """Compare a checked call's outputs (composed into what the task compares) with its variant's reference, keep
    what the integrity checks need, and free the outputs."""
    got = compose(call.variant, list(call.outputs or []))
    ref = refs[call.variant]
    c = tol.compare(got, ref)
    follows = None
    if not c.ok:
        follows = next((u for u, other in enumerate(refs)
                        if u != call.variant and tol.compare(got, other).ok and not tol.compare(ref, other).ok), None)
    d = Digest(c, follows, constant(got, ref), tuple(_hashed(x, hasher) for x in got))
    call.digest, call.outputs = d, None
    return d
