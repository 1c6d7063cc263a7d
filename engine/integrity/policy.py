"""The library policy: may a candidate call vendor libraries (cuBLAS, cuDNN, CUTLASS, CUB, Thrust) and ATen?

- `pure`: no. The candidate computes the result in kernels it wrote (robust-kbench's and KernelBench's rule);
  a library or ATen call is a `fail`, and so is a fallback to ATen for shapes the kernel does not handle.
- `engineering`: yes, as a kernel engineer would (a cuBLASLt GEMM with a fused epilogue, a cuDNN convolution
  followed by a fused kernel). Every use is tagged on the `static` verdict's data and shown with the
  candidate; fallbacks to ATen are `suspicious` (a person looks). The speedup is still against eager and
  torch.compile.

Who decides, first match wins: the session or evaluation (CLI flag, then `[eval] library_policy` in the
config), then the task (`library_policy` in task.toml), then DEFAULT_POLICY.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import KbenchError
from engine.tasks.policies import POLICIES, LibraryPolicy

if TYPE_CHECKING:
    from engine.tasks.model import Task

# The default for every session, LLM sessions included (README "Library policy" says why).
DEFAULT_POLICY: LibraryPolicy = "pure"


class PolicyError(KbenchError):
    """An unknown library policy name."""


def check_policy(value: Any, where: str) -> str:
    if value not in POLICIES:
        raise PolicyError(f"{where}: library policy must be one of {', '.join(POLICIES)}, got {value!r}.")
    return str(value)


@dataclass(frozen=True)
class ResolvedPolicy:
    policy: str
    source: str     # "session" (flag or config), "task" or "default"

    def to_json(self) -> dict[str, str]:
        return {"policy": self.policy, "source": self.source}


def resolve_policy(session: str | None, task: Task | None = None) -> ResolvedPolicy:
    """The policy in force for one evaluation: the session's choice, else the task's, else the default."""
    if session is not None:
        return ResolvedPolicy(check_policy(session, "session"), "session")
    declared = getattr(task, "library_policy", None) if task is not None else None
    if declared:
        return ResolvedPolicy(check_policy(declared, f"task {getattr(task, 'name', '?')}"), "task")
    return ResolvedPolicy(DEFAULT_POLICY, "default")
