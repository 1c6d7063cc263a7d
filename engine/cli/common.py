"""What several commands share: where the workspace is, and checks of names given on the command line."""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, TypeVar

from engine.errors import KbenchError
from engine.tasks.model import ALL_CONFIGS, check_timing_names
from engine.workspace import default_path

if TYPE_CHECKING:
    from engine.proposers.base import Proposer
    from engine.tasks.model import Task

P = TypeVar("P", bound="Proposer")

WORKSPACE_HELP = "the workspace repository (default: $KBENCH_WORKSPACE, else ./workspace)"


def workspace_path(args: argparse.Namespace) -> Path:
    """--workspace, else $KBENCH_WORKSPACE, else ./workspace (engine.workspace.default_path)."""
    given = getattr(args, "workspace", None)
    return Path(given) if given else default_path()


def check_config_names(task: Task, names: Iterable[str] | None, flag: str = "--config",
                       allow_all: bool = False) -> None:
    """Every NAME given with `flag` must be one of the task's configs: an unknown one is bad input (exit 2),
    never a silently empty selection. With `allow_all` (--time-config), `all` alone means every config
    (engine.tasks.model.check_timing_names: never mixed with names)."""
    known = [c.name for c in task.configs]
    if allow_all:
        check_timing_names(names, flag)
    for name in names or ():
        if allow_all and name == ALL_CONFIGS:
            continue
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise KbenchError(f"{flag} {name}: task {task.name!r} ({task.root}) has no config of that name{hint}; "
                              f"its configs: {', '.join(known)}.")


def require_available(proposer: P) -> P:
    """The proposer, or bad input naming why it cannot run here (human without $VISUAL / $EDITOR)."""
    if not proposer.available():
        why = proposer.unavailable_reason()
        raise KbenchError(f"the {proposer.name} proposer cannot run: {why or 'not available'}")
    return proposer
