"""The numeric settings a candidate is judged under, the same in the judge and in its runner.

torch's library switches change what the same call computes: with cuDNN's TF32 on (torch's default) an
`nn.ConvTranspose2d` rounds its operands to 10 mantissa bits, and a KernelBench problem's own `Model`, offered as
its `ModelNew`, missed atol = rtol = 1e-4 by up to 5e-4 against the judge's reference computed with TF32 off
(H200, level 1 problem 57 and level 2 problems 2-4). So the judge applies `JUDGE` to itself before it computes
anything, and sends the same settings to its runner, which applies them right after importing torch and before
the candidate is imported (engine/pipeline/runner/main.py). Both sides then start equal; a candidate that changes a
switch itself is judged on the outputs it returns, like any other choice it makes. The settings are recorded in
the judge's result and the correctness verdict.

Deterministic modes stay at torch's defaults on both sides (the judge does not use them): pinned here, so a
problem file or a candidate's import that flips one in the runner never starts from another place than the judge.

Lazy imports: torch, inside the functions; the runner reads `Numerics` before its jail, where no third-party
package may load (tests/jail/test_jailed_imports.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Numerics:
    matmul_tf32: bool = False                       # torch.backends.cuda.matmul.allow_tf32
    cudnn_tf32: bool = False                        # torch.backends.cudnn.allow_tf32 (convolutions and RNNs)
    float32_matmul_precision: str = "highest"       # torch.set_float32_matmul_precision
    fp16_reduced_precision_reduction: bool = True   # torch.backends.cuda.matmul.allow_fp16_reduced_... (default)
    bf16_reduced_precision_reduction: bool = True   # torch.backends.cuda.matmul.allow_bf16_reduced_... (default)
    cudnn_benchmark: bool = False                   # torch.backends.cudnn.benchmark (default)
    cudnn_deterministic: bool = False               # torch.backends.cudnn.deterministic (default)
    deterministic_algorithms: bool = False          # torch.use_deterministic_algorithms (default)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "Numerics":
        """Strict: every field with its type, nothing else (the judge's own message; a mismatch is kbench's bug)."""
        names = {f.name: f.type for f in fields(cls)}
        if set(obj) != set(names):
            raise ValueError(f"numeric settings {sorted(obj)} are not {sorted(names)}")
        for name, value in obj.items():
            want = str if name == "float32_matmul_precision" else bool
            if type(value) is not want:
                raise ValueError(f"numeric setting {name} must be a {want.__name__}, not {value!r}")
        return cls(**obj)


JUDGE = Numerics()


def apply(n: Numerics) -> None:
    """Set torch's switches to `n` in this process."""
    import torch
    torch.set_float32_matmul_precision(n.float32_matmul_precision)
    # after the precision: on torch 2.9+ both write the same new-style setting, and the explicit flag wins
    torch.backends.cuda.matmul.allow_tf32 = n.matmul_tf32
    torch.backends.cudnn.allow_tf32 = n.cudnn_tf32
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = n.fp16_reduced_precision_reduction
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = n.bf16_reduced_precision_reduction
    torch.backends.cudnn.benchmark = n.cudnn_benchmark
    torch.backends.cudnn.deterministic = n.cudnn_deterministic
    if torch.are_deterministic_algorithms_enabled() != n.deterministic_algorithms:
        # only when it changes: the call itself takes seconds (it loads torch's compiler stack)
        torch.use_deterministic_algorithms(n.deterministic_algorithms)


def current() -> Numerics:
    """torch's switches as this process has them now."""
    import torch
    m = torch.backends.cuda.matmul
    return Numerics(bool(m.allow_tf32), bool(torch.backends.cudnn.allow_tf32), torch.get_float32_matmul_precision(),
                    bool(m.allow_fp16_reduced_precision_reduction), bool(m.allow_bf16_reduced_precision_reduction),
                    bool(torch.backends.cudnn.benchmark), bool(torch.backends.cudnn.deterministic),
                    bool(torch.are_deterministic_algorithms_enabled()))
