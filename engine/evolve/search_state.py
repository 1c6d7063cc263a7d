"""The search's state, saved with every candidate the loop commits, so a resumed session proposes exactly
what an uninterrupted one would have.

What decides the next proposal, besides the population (which the workspace keeps anyway): the loop's
random generator (operator choice, parent tournaments), a proposer's own generator where it has one (an
attribute `rng` holding a `random.Random`), and the current generation's counters (attempts, meta
proposals, parents whose proposals came back empty) and how often each member was drawn as a parent
beyond the children it has (a draw whose proposal was empty or failed still counts in the tournament).

The state after choosing a candidate goes into its commit (`.kbench/candidate.json` "search"), in the same
write as the candidate, so there is no moment where one exists without the other. On resume the loop takes
the state of the newest candidate it committed and goes on from there; what it did after that commit
and before the kill (proposals that came back empty) it does again, identically.

This module reads and sets the planner's counters (engine.evolve.planner) and the loop's generators.
"""

from __future__ import annotations

import base64
import random
import struct
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from engine.evolve.planner import GenerationPlanner
from engine.evolve.population import Population
from engine.proposers.base import Proposer
from engine.workspace.errors import WorkspaceDamagedError

if TYPE_CHECKING:
    from engine.workspace import Workspace

VERSION = 1
SCAN_LIMIT = 64      # members read (newest first) to find the latest saved state


class SearchSession(Protocol):
    """What of an evolution session (engine.evolve.loop) the saved state is read from and written to."""

    ws: Workspace
    population: Population
    planner: GenerationPlanner
    rng: random.Random
    proposer: Proposer        # its `rng`, where it has one
    generation: int


def rng_state(rng: random.Random) -> dict[str, Any]:
    version, internal, gauss = rng.getstate()
    return {"version": version, "mt": base64.b64encode(struct.pack(f"<{len(internal)}I", *internal)).decode(),
            "gauss": gauss}


def set_rng_state(rng: random.Random, state: dict[str, Any]) -> None:
    raw = base64.b64decode(state["mt"])
    internal = struct.unpack(f"<{len(raw) // 4}I", raw)
    rng.setstate((int(state["version"]), tuple(internal), state.get("gauss")))


def search_state(session: SearchSession, gen: int, parents: Sequence[str]) -> dict[str, Any]:
    """The loop's state now, as it will be once the candidate with `parents` is committed in `gen`."""
    pop, planner = session.population, session.planner
    children = _children_counts(pop)
    for p in parents:
        children[p] = children.get(p, 0) + 1
    extra = {m.id: m.times_parent - children.get(m.id, 0) for m in pop.members.values()
             if m.times_parent != children.get(m.id, 0)}
    state: dict[str, Any] = {
        "v": VERSION, "generation": gen, "rng": rng_state(session.rng),
        "attempts": planner.attempts.get(gen, 0), "meta_done": planner.meta_done.get(gen, 0),
        "empty_parents": sorted(planner.empty_parents.get(gen, ())), "extra_picks": extra}
    prop_rng = getattr(session.proposer, "rng", None)
    if isinstance(prop_rng, random.Random):
        state["proposer_rng"] = rng_state(prop_rng)
    return state


def restore_search_state(session: SearchSession) -> dict[str, Any] | None:
    """After the population was loaded from the workspace: set the loop back to the newest saved state.
    Returns that state (None where no candidate carries one: a session from before states were kept)."""
    state = latest(session)
    if state is None:
        return None
    gen = int(state["generation"])
    set_rng_state(session.rng, state["rng"])
    prop_rng = getattr(session.proposer, "rng", None)
    if isinstance(prop_rng, random.Random) and state.get("proposer_rng"):
        set_rng_state(prop_rng, state["proposer_rng"])
    if gen == session.generation:
        session.planner.attempts[gen] = int(state.get("attempts", 0))
        session.planner.meta_done[gen] = int(state.get("meta_done", 0))
        session.planner.empty_parents[gen] = set(state.get("empty_parents") or ())
    members = session.population.members
    for cid, n in (state.get("extra_picks") or {}).items():
        if cid in members:
            members[cid].times_parent += int(n)
    return state


def latest(session: SearchSession) -> dict[str, Any] | None:
    """The saved state of the newest candidate that has one (the loop commits one candidate at a time, so
    the newest by generation and number is the last it committed)."""
    reader = getattr(session.ws, "search_state", None)
    if reader is None:
        return None
    newest = sorted(session.population.members.values(), key=lambda m: (m.generation, _n(m.id)), reverse=True)
    for m in newest[:SCAN_LIMIT]:
        try:
            state = reader(m.id)
        except WorkspaceDamagedError:
            if getattr(session.ws, "accept_damage", False):
                continue
            raise
        if state and state.get("v") == VERSION and "rng" in state:
            return state
    return None


def _children_counts(pop: Population) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in pop.members.values():
        for p in m.parents:
            if p in pop.members:
                counts[p] = counts.get(p, 0) + 1
    return counts


def _n(cid: str) -> int:
    try:
        return int(cid.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return 0
