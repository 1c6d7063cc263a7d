"""The parts a session is built from, built the same way for both front ends: the evaluator (through one
seam), the LLM client and whether one is available, the proposer, the LLM verifiers and the description
of the target machine the prompts carry.

Evaluations go through one seam, `EvaluatorFactory(task, direction, config)`: by default
engine.evolve.factory.make_evaluator (the local pipeline or Ray); a front end or a test may hand its own.

SessionWiring is a base of engine.service.session_service.SessionService and reads the service's settings
(workspace, config, env, evaluator factory, target, LLM options).

Lazy imports: the evaluators (the evolve package, about 0.2 s to import) and the LLM client, proposer and
verifiers (the anthropic SDK alone takes about a second), only when a session is built with them: a session of
the offline proposers never loads the SDKs, and describing one loads neither.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from engine.config.sections import Config
from engine.errors import KbenchError
from engine.llm.availability import llm_available, no_key_message
from engine.llm.target import probe
from engine.proposers import LLM_PROPOSERS, make_proposer
from engine.proposers.replay import ReplayProposer

if TYPE_CHECKING:
    from engine.candidates import Candidate
    from engine.evolve.outcome import Evaluator
    from engine.llm.accounting import CostLedger
    from engine.llm.client import LLMClient
    from engine.llm.openai_client import OpenAICompatClient
    from engine.llm.target import TargetInfo
    from engine.llm.verifiers import Verification
    from engine.proposers.base import Proposer
    from engine.service.spec import SessionPlan
    from engine.tasks.model import Task
    from engine.workspace import Workspace

EvaluatorFactory = Callable[["Task", str, Config], "Evaluator"]   # (task, direction, config) -> an evaluator


def default_evaluator_factory(task: Task, direction: str, config: Config, *, sequential: bool = False) -> Evaluator:
    """The seam to the evaluation harness: the configured executor ([executor], [eval])."""
    from engine.evolve.factory import make_evaluator
    return make_evaluator(task, direction, config, sequential=sequential)


_probe_lock = threading.Lock()
_probed: TargetInfo | None = None


def probed_target() -> TargetInfo:
    """engine.llm.target.probe(), once per process."""
    global _probed
    with _probe_lock:
        if _probed is None:
            _probed = probe()
        return _probed


class SessionWiring:
    """Builds a session's evaluator, LLM client, proposer and verifier from the service's settings."""

    # Set by SessionService.__init__.
    ws: Workspace
    config: Config
    env: Mapping[str, str] | None
    evaluator_factory: EvaluatorFactory
    _target: TargetInfo | Callable[[], TargetInfo] | None
    llm_options: dict[str, Any]

    # ------------------------------------------------------------------------------ availability

    def llm_proposer(self) -> str:
        """The LLM proposer `[llm] provider` selects: anthropic or openai."""
        return next(p for p, prov in LLM_PROPOSERS.items() if prov == self.config.llm.provider)

    def llm_available(self) -> bool:
        return llm_available(self.env, self.config.llm)

    def llm_notice(self) -> str:
        return "" if self.llm_available() else no_key_message(self.config.llm)

    # ------------------------------------------------------------------------------ the parts

    def _evaluator(self, task: Task, direction: str, sequential: bool) -> Evaluator:
        if self.evaluator_factory is default_evaluator_factory:
            return default_evaluator_factory(task, direction, self.config, sequential=sequential)
        return self.evaluator_factory(task, direction, self.config)

    def make_evaluator(self, task: Task, direction: str) -> Evaluator:
        return self._evaluator(task, direction, False)

    def _llm_client(self, ledger: CostLedger) -> LLMClient | OpenAICompatClient:
        from engine.llm.factory import make_client
        kw = {"env": self.env, **self.llm_options} if self.env is not None else dict(self.llm_options)
        return make_client(self.config.llm, ledger, **kw)

    def _proposer(self, plan: SessionPlan, ledger: CostLedger) -> Proposer:
        if plan.proposer in LLM_PROPOSERS:
            from engine.proposers.anthropic import LLMProposer
            client = self._llm_client(ledger)
            if not client.available:
                raise KbenchError(self.llm_notice() or "the LLM proposer is not available")
            return LLMProposer(client, self.config, target=self._target_text())
        if plan.proposer == "replay":
            source = plan.session_config.get("replay_from")
            if not source:
                raise KbenchError("the replay proposer needs --replay-from DIR|SESSION")
            if source in {s.name for s in self.ws.sessions()}:
                return ReplayProposer.from_workspace(self.ws, source)
            return ReplayProposer.from_directory(source)
        prop = make_proposer(plan.proposer, self.config)
        if hasattr(prop, "available") and not prop.available():   # human without $VISUAL / $EDITOR
            why = prop.unavailable_reason() if hasattr(prop, "unavailable_reason") else ""
            raise KbenchError(f"the {plan.proposer} proposer cannot run: {why or 'not available'}")
        return prop

    def _verifier(self, plan: SessionPlan, ledger: CostLedger,
                  proposer: Proposer) -> Callable[[Candidate], Verification]:
        from engine.llm.verifiers import verify

        client = getattr(proposer, "client", None) or self._llm_client(ledger)
        config, task, direction = self.config, plan.task, plan.direction
        target = getattr(proposer, "target", None)
        target = target if isinstance(target, str) else self._target_text()    # the GPU, as the proposer sees it
        return lambda cand: verify(client, config, task, direction, cand, target=target)

    def _target_text(self) -> str:
        target = self._target
        if target is None:
            target = probed_target()
        elif callable(target):
            target = target()
        return target.describe() if hasattr(target, "describe") else str(target or "")
