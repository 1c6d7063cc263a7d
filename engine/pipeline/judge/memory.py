"""Whose fault is it when the judge's own GPU allocation fails: the GPU's other users (the candidate is left
unmeasured and judged again later) or the candidate (a failure like any other). The same question for the runner:
a config whose inputs it could not take, or whose call raised while checked or timed, for want of GPU memory
(`runner_memory_excuse`).

A candidate must never be able to turn its own failure into "unmeasured", so the excuse is narrow:
- NVML must list this GPU's processes with pids this process can match (its own among them, figures known);
- the candidate's side is the judge's whole process tree (its runner, anything the runner forked, strays
  re-parented to the judge), kbench's own side the judge's parent and its other children (spare judges and
  their runners), and only processes in neither count as the GPU's other users;
- those others must hold more of the GPU than the candidate's side;
- nothing may have failed already (a correctness, integrity or forgery verdict stands), and the failure must
  not come from taking a candidate's output of another shape or dtype than the reference's (its size is the
  candidate's doing; an output of the reference's size is the judge's own allocation like any other).
The judge's own allocation failing is also excused when the candidate's side holds no more than its share of a
config (`config_share`): then the GPU is too small for the judge and the runner of that config together. The
runner's out-of-memory never is on that ground alone: its words could be forged by a candidate holding nothing.

Lazy imports: torch, in the judge only; the parent imports this module (through the contention rule) without it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from engine import procs
from engine.harness.nvml import memory_by_process

if TYPE_CHECKING:
    from engine.pipeline.protocol.result import Progress


# What the candidate's side may hold beyond its copies of a config: a CUDA context, library handles and workspaces
# (cuDNN, cuBLAS), the caching allocator's rounding.
CANDIDATE_SLACK = 2 << 30


@dataclass(frozen=True)
class MemoryBlame:
    contended: bool      # the GPU's other users hold more than the candidate's side
    figures: str         # " (the candidate's processes held N MiB, other processes M MiB, the judge K MiB)"
    candidate: int = 0   # bytes the candidate's side held


def config_share(footprint: int, variants: int) -> int:
    """What the candidate's side may hold on the GPU for a config whose arguments, weights and reference outputs
    take `footprint` bytes, without that being its own doing: the runner's copy of each of the `variants`, its live
    arguments, the weights, up to three outputs alive at once (the call's, the previous call's kept for the
    persistence check, the settle probe's snapshot). The candidate's share is that of every config its runner
    holds, plus CANDIDATE_SLACK."""
    return (variants + 4) * footprint


def judge_memory_outcome(blame: MemoryBlame | None, share: int, where: str) -> tuple[str | None, str | None]:
    """(unmeasured, error) when the judge's own GPU allocation failed (`blame`: NVML's reading, None when it
    cannot say or a failure is on record). Unmeasured when the GPU's other users hold more of it than the
    candidate's side, or when the candidate's side holds no more than its `share` (the GPU is too small for this
    config's judge and runner together: kbench's limit, not the kernel's); a candidate holding more than its share
    is failed for it. `where`: judge_out_of_memory's reason."""
    if blame is None:
        return None, None
    if blame.contended or blame.candidate <= share:
        return where + blame.figures, None
    return None, (f"the judge ran out of GPU memory{blame.figures}: the candidate's processes held more than the "
                  f"{share >> 20} MiB its runner needs for this config")


def out_of_memory(exc: BaseException) -> bool:
    """The judge's own CUDA allocation failed (torch's OutOfMemoryError, or the same from the helper's kernel,
    which surfaces as a RuntimeError naming it)."""
    return type(exc).__name__ == "OutOfMemoryError" or (isinstance(exc, RuntimeError) and "out of memory" in str(exc))


def runner_memory_excuse(error: str, failed_already: bool,
                         blame: Callable[[], MemoryBlame | None]) -> MemoryBlame | None:
    """A config the runner could not take or run for want of GPU memory (its error names an out-of-memory): the
    blame when that leaves the candidate unmeasured, else None and the failure stands. The runner's words, which
    candidate code could forge, only open the question; the answer is NVML's, read by the judge (`blame`): the
    GPU's other users hold more of it than the candidate's side. Nothing may have failed before."""
    if failed_already or not ("OutOfMemoryError" in error or "out of memory" in error.lower()):
        return None
    found = blame()
    return found if found is not None and found.contended else None


@dataclass(frozen=True)
class GpuSides:
    """This judge's GPU and who is who on it: the judge, the candidate's side, kbench's own side."""
    bus: str             # the GPU's PCI bus id in NVML's form
    judge: int
    candidate: set[int]
    kbench: set[int]


def gpu_sides() -> GpuSides:
    """Raises where the GPU or the process tree cannot be read (nothing is excused then)."""
    import torch
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    bus = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    tree = procs.process_tree()
    me = os.getpid()
    candidate = set(procs.descendants(me, tree))
    parent = os.getppid()
    return GpuSides(bus, me, candidate, {parent, *procs.descendants(parent, tree)} - candidate - {me})


def memory_blame() -> MemoryBlame | None:
    """The blame for this judge process's GPU (None: NVML cannot say, so nothing is excused)."""
    try:
        sides = gpu_sides()
        held = memory_by_process(sides.bus)
    except Exception:  # noqa: BLE001 - no attribution possible
        return None
    return blame_from(held, sides.judge, sides.candidate, sides.kbench)


def blame_from(held: dict[int, int] | None, judge_pid: int, candidate: set[int],
               kbench: set[int]) -> MemoryBlame | None:
    if not held or judge_pid not in held or not any(held.values()):
        return None   # another pid namespace's view, or no per-process figures (MIG): pids cannot be weighed
    theirs = sum(b for pid, b in held.items() if pid in candidate)
    others = sum(b for pid, b in held.items() if pid not in candidate and pid not in kbench and pid != judge_pid)
    figures = (f" (the candidate's processes held {theirs >> 20} MiB, other processes {others >> 20} MiB, the "
               f"judge {held[judge_pid] >> 20} MiB)")
    return MemoryBlame(others > theirs, figures, theirs)


def judge_out_of_memory(progress: Progress | None) -> str:
    """Why the judge stopped, when its own GPU memory ran out: where, and what the GPU holds now."""
    at = progress.where() if progress else ""
    held = ""
    try:
        import torch
        free, total = torch.cuda.mem_get_info()
        held = f" ({free >> 20} MiB free of {total >> 20} MiB)"
    except Exception:  # noqa: BLE001 - the figure is a courtesy; the reason stands without it
        pass
    return (f"the judge ran out of GPU memory{at}{held}: the GPU is shared with other work or too small for "
            "this task's configs; not a verdict on the kernel")
