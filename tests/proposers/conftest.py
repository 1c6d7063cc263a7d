"""Helpers of the proposer tests."""

from __future__ import annotations

from engine.proposers import ProposalRequest


def req(task, op, *parents, **kw) -> ProposalRequest:
    """A ProposalRequest for `task`: operator `op` ("translate", "mutate", ...), `parents` the parent candidates,
    `kw` its other fields. Imported by the tests that use it (`from tests.proposers.conftest import req`)."""
    return ProposalRequest(task=task, operator=op, parents=tuple(parents), **kw)
