"""Proposers: one interface (engine.proposers.base.Proposer), four implementations.

    anthropic  translate / mutate / crossover / repair / meta through the Messages API
    openai     the same, through an OpenAI-compatible endpoint ([llm] provider = "openai-compatible")
    tuner      sweeps a parent's annotated knobs; no LLM
    replay     re-plays a directory of candidates or a recorded session
    human      the user edits a candidate in $VISUAL / $EDITOR

`make_proposer` builds one by name.

Lazy imports: `make_proposer` imports only the implementation asked for, so that the offline proposers never
load the LLM SDKs (about a second).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.config.load import load_config

from engine.config.sections import Config
from engine.errors import KbenchError
from engine.proposers.base import (OPERATORS, Proposal, ProposalRequest, ProposalStatus, Proposer, guarded,
                                   parent_id)

if TYPE_CHECKING:
    from engine.llm.accounting import CostLedger

PROPOSER_NAMES = ("anthropic", "openai", "tuner", "replay", "human")
LLM_PROPOSERS = {"anthropic": "anthropic", "openai": "openai-compatible"}   # proposer -> [llm] provider

__all__ = ["LLM_PROPOSERS", "OPERATORS", "PROPOSER_NAMES", "Proposal", "ProposalRequest", "ProposalStatus",
           "Proposer", "guarded", "make_proposer", "parent_id"]


def make_proposer(name: str, config: Config | None = None, *, ledger: CostLedger | None = None,
                  replay_from: str | Path | None = None, **kw: Any) -> Proposer:
    """Build a proposer. `ledger` (a CostLedger) is shared with the verifiers so one budget covers both;
    `replay_from` is the directory the replay proposer reads (a session replay is built with
    ReplayProposer.from_session and a workspace adapter)."""
    config = config or load_config()
    if name in LLM_PROPOSERS:
        from engine.llm.accounting import CostLedger
        from engine.llm.factory import make_client
        from engine.proposers.anthropic import LLMProposer
        if config.llm.provider != LLM_PROPOSERS[name]:
            raise KbenchError(f"the {name} proposer needs [llm] provider = \"{LLM_PROPOSERS[name]}\" "
                              f"(the config says {config.llm.provider!r})")
        target = kw.pop("target", "")
        client = make_client(config.llm, ledger if ledger is not None else CostLedger(config.budget.usd), **kw)
        return LLMProposer(client, config, target=target)
    if name == "tuner":
        from engine.proposers.tuner import TunerProposer
        return TunerProposer(**kw)
    if name == "replay":
        from engine.proposers.replay import ReplayProposer
        if replay_from is None:
            raise KbenchError("the replay proposer needs a directory of candidates to replay (replay_from).")
        return ReplayProposer.from_directory(replay_from, **kw)
    if name == "human":
        from engine.proposers.human import HumanProposer
        return HumanProposer(**kw)
    raise KbenchError(f"no proposer named {name!r}; known: {', '.join(PROPOSER_NAMES)}.")
