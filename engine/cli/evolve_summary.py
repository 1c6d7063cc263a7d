"""The last lines `kbench evolve` prints, and its exit code (kept out of cmd_evolve so each reads alone)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.gpu_wait import WAITING_FOR_GPU

if TYPE_CHECKING:
    from engine.evolve.events import Stopped

EXIT_WAITING_FOR_GPU = 3   # as `kbench eval`: compiled, not checked (no GPU)


def summary_lines(stats: dict[str, Any], result: Stopped | None, session: str) -> list[str]:
    """A throughput figure only for what was measured; where nothing was, what waits for a GPU instead."""
    lines = []
    completed = int(stats.get("completed") or 0)
    measured = completed - int(stats.get("unmeasured") or 0)
    cph, frac = stats.get("candidates_per_hour"), stats.get("gpu_busy_fraction")
    if measured > 0 and cph:
        rate = cph * measured / completed
        lines.append(f"measured {measured} candidate(s): {rate:.0f}/hour, GPU busy {(frac or 0) * 100:.0f}%")
    waiting = getattr(result, "waiting_for_gpu", 0) if result is not None else 0
    if waiting:
        lines.append(f"{waiting} candidate(s) compiled and {WAITING_FOR_GPU}: run the same command on a machine "
                     "with a GPU to measure them and go on")
    elif completed and measured <= 0:
        lines.append("nothing was measured (no GPU visible to the evaluator)")
    lines.append(f"resume with the same command; `kbench log {session}` lists the candidates")
    return lines


def exit_code(result: Stopped | None, interrupted: bool) -> int:
    """130 after Ctrl-C; 3 where the session stopped waiting for a GPU; 0 when the budgets ran out; else 1."""
    if interrupted:
        return 130
    if result is None:
        return 1
    if result.completed:
        return 0
    return EXIT_WAITING_FOR_GPU if getattr(result, "waiting_for_gpu", 0) and not result.best else 1
