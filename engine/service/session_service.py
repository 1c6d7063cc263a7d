"""SessionService: what the CLI and the app start sessions through. It resolves a SessionSpec against the
session's stored settings, the config and the defaults (describe), then builds and starts the session
(start, resume): one cost ledger shared by the proposer and the LLM verifiers, the static checks, the
session's config written to the workspace, the session claimed for this process.

How the parts are built is engine.service.wiring (SessionWiring); re-evaluation is
engine.service.reevaluation (SessionReevaluation); the values exchanged are engine.service.spec.

Lazy imports: the evolve package (the loop, its operators and checks: about 0.2 s to import, multiprocessing
included), only in the methods that describe or start a session: the service also serves what needs none of it
(a session's task, re-evaluation through a front end's own evaluator).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.config.sections import Config
from engine.errors import KbenchError
from engine.integrity.policy import resolve_policy
from engine.llm.accounting import CostLedger
from engine.proposers import LLM_PROPOSERS
from engine.service.reevaluation import SessionReevaluation
from engine.service.spec import (
    DEFAULTS,
    SESSION_PROPOSERS,
    RunningSession,
    SessionPlan,
    SessionSpec,
)
from engine.service.wiring import (
    EvaluatorFactory,
    SessionWiring,
    default_evaluator_factory,
)
from engine.tasks.loader import load_task
from engine.tasks.model import Task

if TYPE_CHECKING:
    from engine.llm.target import TargetInfo
    from engine.proposers.base import Proposer
    from engine.workspace import Workspace

_COMMANDS = {"cli": "kbench evolve", "tui": "kbench app", "app": "kbench app"}   # how a claim names its holder


class SessionService(SessionWiring, SessionReevaluation):
    """One workspace's sessions, described, started and resumed with one config and evaluator seam."""

    def __init__(self, workspace: Workspace, config: Config, *, env: Mapping[str, str] | None = None,
                 evaluator_factory: EvaluatorFactory | None = None,
                 target: TargetInfo | Callable[[], TargetInfo] | None = None,
                 llm_options: dict[str, Any] | None = None):
        """`target`: a TargetInfo (or a callable giving one) for the prompts; None probes this machine when an
        LLM session starts. `llm_options`: extra keyword arguments for the LLM client (tests: sleep, clock)."""
        self.ws = workspace
        self.config = config
        self.env = env
        self.evaluator_factory = evaluator_factory or default_evaluator_factory
        self._target = target
        self.llm_options = dict(llm_options or {})

    # ------------------------------------------------------------------------------ describe

    def describe(self, spec: SessionSpec) -> SessionPlan:
        """Resolve a spec against the session's stored settings (on a resume), the config and the defaults.
        Raises KbenchError for anything a person must fix (unknown task, proposer, bad numbers)."""
        from engine.evolve.operators import DEFAULT_WEIGHTS, parse_weights

        existing = {s.name: s for s in self.ws.sessions()}
        info = existing.get(spec.name) if spec.name is not None else None
        task = load_task(spec.task) if spec.task is not None else None
        if info is None and task is None:
            raise KbenchError(f"no session {spec.name!r} to resume, and no task to start one" if spec.name
                              else "a new session needs a task")
        if info is None and spec.name is None:       # the default name of a session that exists: a resume
            guess = self._default_name(task, spec.direction or "forward", spec.proposer or self.llm_proposer())
            info = existing.get(guess)
        if info is not None and getattr(info, "problem", None):  # named, never resumed over in silence
            raise KbenchError(info.problem)
        stored = dict(info.config or {}) if info is not None else {}
        if task is None:
            task = self.task_of(info.name)
        direction = spec.direction or (info.direction if info is not None else "forward")
        task.spec(direction)
        if info is not None and (info.task != task.name or info.direction != direction):
            raise KbenchError(f"session {info.name!r} evolves {info.task} {info.direction}, not {task.name} "
                              f"{direction}; choose another session name")
        proposer = spec.proposer or stored.get("proposer") or (info.proposer if info is not None else None) \
            or self.llm_proposer()
        if proposer not in SESSION_PROPOSERS:
            raise KbenchError(f"no session proposer named {proposer!r}; known: {', '.join(SESSION_PROPOSERS)}")
        llm = proposer in LLM_PROPOSERS
        if llm and self.config.llm.provider != LLM_PROPOSERS[proposer]:
            raise KbenchError(f"the {proposer} proposer needs [llm] provider = \"{LLM_PROPOSERS[proposer]}\"; "
                              f"the config says {self.config.llm.provider!r}")

        def pick(value: Any, key: str, default: Any) -> Any:
            return value if value is not None else stored.get(key, default)

        generations = int(pick(spec.generations, "generations", DEFAULTS.generations))
        population = int(pick(spec.population, "population", DEFAULTS.population))
        if generations < 0 or population < 1:
            raise KbenchError("generations must be >= 0 and population >= 1")
        usd = pick(spec.usd, "budget_usd", self.config.budget.usd if llm else None)
        operators_text = pick(spec.operators, "operators", None)
        weights = parse_weights(operators_text) if operators_text else dict(
            DEFAULT_WEIGHTS.get("anthropic" if llm else proposer, {"mutate": 1.0}))
        verify = bool(llm and self.config.verify.enabled and pick(spec.verify, "verify", True))
        name = spec.name or (info.name if info is not None else self._default_name(task, direction, proposer))
        resumed = info is not None
        model = self.config.llm.model if llm else None
        session_config = {"generations": generations, "population": population, "budget_usd": usd,
                          "operators": operators_text, "seed": int(pick(spec.seed, "seed", 0)),
                          "proposer": proposer, "provider": self.config.llm.provider if llm else None,
                          "model": model, "verify": verify,
                          "use_baseline": bool(pick(spec.use_baseline, "use_baseline", True)),
                          "hints": pick(spec.hints, "hints", ""), "wall_s": spec.wall_s,
                          "replay_from": pick(spec.replay_from, "replay_from", None),
                          "started_from": stored.get("started_from", spec.started_from),
                          "library_policy": resolve_policy(self.config.eval.library_policy, task).to_json()}
        return SessionPlan(name=name, task=task, direction=direction, proposer=proposer,
                           provider=session_config["provider"], model=model, generations=generations,
                           population=population, usd=usd, wall_s=spec.wall_s, operators=weights,
                           seed=session_config["seed"], use_baseline=session_config["use_baseline"],
                           hints=session_config["hints"], verify=verify,
                           proposals_in_flight=self.config.llm.concurrency if llm else 1, resumed=resumed,
                           session_config=session_config)

    @staticmethod
    def _default_name(task: Task, direction: str, proposer: str) -> str:
        return f"{task.name}-{'bwd' if direction == 'backward' else 'fwd'}-{proposer}"

    def task_of(self, session: str) -> Task:
        """The task a session evolves: its recorded copy when its folder still exists, else by name."""
        raw = self.ws._session_json(session)  # noqa: SLF001 - the session's own record of its task
        tj = raw.get("task_json") or {}
        if tj and Path(str(tj.get("root", ""))).exists():
            return Task.from_json(tj)
        return load_task(raw.get("task") or self.ws.session(session).task)

    # ------------------------------------------------------------------------------ start / resume

    def start(self, spec: SessionSpec, *, on_event: Callable[[Any], None] | None = None, paused: bool = False,
              on_unavailable: str = "stop", sequential: bool = False, background: bool = True,
              proposer: Proposer | None = None) -> RunningSession:
        """Build and start (on its own thread, unless `background` is False) the session the spec describes;
        a session of that name is resumed. Events go to `on_event` on the loop's thread. `proposer`: one the
        front end built itself (the app's human proposer, whose editor the app must run)."""
        from engine.evolve.checks import session_checks
        from engine.evolve.loop import Budgets, EvolutionSession
        from engine.evolve.operators import OperatorPolicy
        from engine.evolve.preflight import check_can_start

        plan = self.describe(spec)
        ledger = CostLedger(None)   # the loop enforces the session budget, counting what earlier runs spent
        proposer = proposer if proposer is not None else self._proposer(plan, ledger)
        policy = OperatorPolicy(weights=dict(plan.operators),
                                seed_operator="" if plan.proposer == "tuner" else "translate")
        if not plan.resumed:   # a session that could hold no candidate is refused before anything is written
            check_can_start(plan.task, plan.direction, proposer, policy, plan.use_baseline)
        # The session's one writer until it is closed: a second writer is refused here, naming the holder,
        # before any evaluator exists.
        claim = self.ws.claim(plan.name, _COMMANDS.get(spec.started_from, f"kbench {spec.started_from}"),
                              take_over=spec.take_over)
        try:
            verifier = self._verifier(plan, ledger, proposer) if plan.verify else None
            evaluator = self._evaluator(plan.task, plan.direction, sequential)
        except BaseException:
            claim.release()
            raise
        es = EvolutionSession(
            self.ws, plan.name, plan.task, proposer, evaluator, direction=plan.direction,
            budgets=Budgets(generations=plan.generations, population=plan.population, usd=plan.usd,
                            wall_s=plan.wall_s, proposals_in_flight=plan.proposals_in_flight),
            policy=policy, ledger=ledger, verifier=verifier, use_baseline=plan.use_baseline, hints=plan.hints,
            seed=plan.seed, model=plan.model, session_config=plan.session_config, on_unavailable=on_unavailable,
            checks=session_checks(self.config.eval.library_policy), profile=self.config.eval.profile)
        running = RunningSession(es, evaluator, plan, ledger, claim)
        if on_event is not None:
            es.subscribe(on_event)
        if paused:
            es.pause()
        if background:
            es.start()
        return running

    def resume(self, name: str, **overrides: Any) -> RunningSession:
        """Start session `name` again with its stored settings (overrides: SessionSpec fields, or start()'s)."""
        start_kw = {k: overrides.pop(k) for k in ("on_event", "paused", "on_unavailable", "sequential", "background")
                    if k in overrides}
        if name not in {s.name for s in self.ws.sessions()}:
            raise KbenchError(f"no session {name!r} to resume")
        return self.start(SessionSpec(name=name, **overrides), **start_kw)
