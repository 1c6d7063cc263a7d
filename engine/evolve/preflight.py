"""Refuse a session that cannot fill its generation 0, before anything is written to the workspace.

Generation 0 is the task's baseline, or proposals from nothing (translations). A proposer that cannot
translate (the tuner sweeps a parent's knobs) therefore needs the baseline: without it the session would be
created, propose nothing and stay behind empty. Imported tasks (robust-kbench, KernelBench) ship no baseline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.errors import KbenchError

if TYPE_CHECKING:
    from engine.evolve.operators import OperatorPolicy
    from engine.proposers.base import Proposer
    from engine.tasks.model import Task


def check_can_start(task: Task, direction: str, proposer: Proposer, policy: OperatorPolicy,
                    use_baseline: bool) -> None:
    """Raise KbenchError naming what is missing where generation 0 could hold no candidate."""
    if use_baseline and task.baseline_dir(direction) is not None:
        return
    supported = frozenset(proposer.operators)
    seed = policy.seed_operator
    if seed and (not supported or seed in supported):
        return
    name = proposer.name
    if not use_baseline:
        why = "--no-baseline leaves generation 0 to proposals"
    else:
        why = (f"task {task.name!r} has no {direction} baseline ({task.root}/baselines/{direction}/kernel.cu, or "
               "kernel.py for a Triton one)")
    raise KbenchError(f"the {name} proposer cannot start this session: it works from a parent, and {why}. "
                      "Use a proposer that translates the reference (anthropic, human), or give the task a baseline "
                      "(docs/formats.md, native task folder). Nothing was written.")
