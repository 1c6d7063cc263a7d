"""One session service for the CLI and the app: describe, start, resume and re-evaluate evolution sessions.

Both front ends hand a SessionSpec (what the user asked; None means "the default") to the same
SessionService, which resolves it once (SessionPlan: task, proposer, budgets, operators, verifiers, model)
and wires it the same way: one cost ledger shared by the proposer and the LLM verifiers, the static checks,
the LLM verifiers for LLM proposers, the session's config written to the workspace so a resume (from
either front end) rebuilds the same session. Defaults live here and nowhere else.

Evaluations go through one seam, `EvaluatorFactory(task, direction, config)`: today
engine.evolve.factory.make_evaluator (the local pipeline or Ray), or the fake evaluator for tests and
machines without a GPU.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from engine.config import Config
from engine.errors import KbenchError
from engine.proposers import LLM_PROPOSERS

EvaluatorFactory = Callable[[Any, str, Config], Any]   # (task, direction, config) -> engine.evolve Evaluator
_COMMANDS = {"cli": "kbench evolve", "tui": "kbench app", "app": "kbench app"}   # how a claim names its holder


@dataclass(frozen=True)
class SessionDefaults:
    generations: int = 3          # generations after generation 0
    population: int = 4           # candidates per generation


DEFAULTS = SessionDefaults()
SESSION_PROPOSERS = ("anthropic", "openai", "tuner", "replay", "human")


@dataclass(frozen=True)
class SessionSpec:
    """What a front end asks for. None: the session's stored value on a resume, else the default."""

    task: str | None = None               # built-in name, task folder or KernelBench .py (None: resume by name)
    direction: str | None = None
    proposer: str | None = None           # None: the LLM proposer of [llm] provider
    generations: int | None = None
    population: int | None = None
    usd: float | None = None              # LLM dollars (None: [budget] usd for LLM proposers)
    wall_s: float | None = None
    name: str | None = None               # session name (None: <task>-<fwd|bwd>-<proposer>)
    operators: str | None = None          # "mutate=4,crossover=1,repair=1,meta=0.5"
    seed: int | None = None
    use_baseline: bool | None = None
    hints: str | None = None
    verify: bool | None = None            # None: [verify] enabled (LLM proposers only)
    replay_from: str | None = None
    started_from: str = "cli"
    take_over: bool = False               # the session's writer is gone: take its claim (engine.workspace.writers)


@dataclass(frozen=True)
class SessionPlan:
    name: str
    task: Any
    direction: str
    proposer: str
    provider: str | None                  # the LLM provider, for LLM proposers
    model: str | None
    generations: int
    population: int
    usd: float | None
    wall_s: float | None
    operators: dict[str, float]
    seed: int
    use_baseline: bool
    hints: str
    verify: bool
    proposals_in_flight: int
    resumed: bool
    session_config: dict[str, Any]

    def summary(self) -> str:
        verify = "LLM verifiers on" if self.verify else "no LLM verifiers"
        usd = f"${self.usd:g}" if self.usd is not None else "no dollar limit"
        who = f"{self.proposer} ({self.model})" if self.model else self.proposer
        return (f"{'resume' if self.resumed else 'new'} session {self.name}: {self.task.name} {self.direction}, {who}, "
                f"{self.generations} generation(s) of {self.population}, {usd}, {verify}")


@dataclass
class RunningSession:
    """A started session, the evaluator it owns and the plan it runs."""

    session: Any                          # engine.evolve.loop.EvolutionSession
    evaluator: Any
    plan: SessionPlan
    ledger: Any = None
    claim: Any = None                     # this process's claim on the session (released on close)
    _closed: bool = field(default=False, repr=False)

    def close(self, wait: bool = True) -> None:
        if not self._closed:
            self._closed = True
            try:
                self.evaluator.close(wait=wait)
            finally:
                if self.claim is not None:
                    self.claim.release()

    def stats(self) -> dict[str, Any]:
        return self.evaluator.stats()


@dataclass(frozen=True)
class Reevaluated:
    id: str
    before: float | None                  # the speedup before this evaluation
    status: Any                           # the candidate's CandidateStatus after its notes
    outcome: Any                          # EvalOutcome
    profile: Any = None                   # the `profile` Verdict of a profile run after it ([eval] profile = "best")


def default_evaluator_factory(task: Any, direction: str, config: Config, *, sequential: bool = False) -> Any:
    """The seam to the evaluation harness: the configured executor ([executor], [eval])."""
    from engine.evolve.factory import make_evaluator
    return make_evaluator(task, direction, config, sequential=sequential)


def fake_evaluator_factory(delay_s: float = 0.0) -> EvaluatorFactory:
    """The engine's FakeEvaluator (no compiler, no GPU): tests and demos."""
    def factory(task: Any, direction: str, config: Config) -> Any:
        from engine.evolve.fake import FakeEvaluator
        return FakeEvaluator(task, delay_s=delay_s, profile=config.eval.profile == "all")
    return factory


_probe_lock = threading.Lock()
_probed: Any = None


def probed_target() -> Any:
    """engine.llm.target.probe(), once per process."""
    global _probed
    with _probe_lock:
        if _probed is None:
            from engine.llm.target import probe
            _probed = probe()
        return _probed


class SessionService:
    def __init__(self, workspace: Any, config: Config, *, env: Mapping[str, str] | None = None,
                 evaluator_factory: EvaluatorFactory | None = None, target: Any = None,
                 llm_options: dict[str, Any] | None = None):
        """`target`: a TargetInfo (or a callable giving one) for the prompts; None probes this machine when an
        LLM session starts. `llm_options`: extra keyword arguments for the LLM client (tests: sleep, clock)."""
        self.ws = workspace
        self.config = config
        self.env = env
        self.evaluator_factory = evaluator_factory or default_evaluator_factory
        self._target = target
        self.llm_options = dict(llm_options or {})

    # ------------------------------------------------------------------------------ availability

    def llm_proposer(self) -> str:
        """The LLM proposer `[llm] provider` selects: anthropic or openai."""
        return next(p for p, prov in LLM_PROPOSERS.items() if prov == self.config.llm.provider)

    def llm_available(self) -> bool:
        from engine.llm.availability import llm_available
        return llm_available(self.env, self.config.llm)

    def llm_notice(self) -> str:
        from engine.llm.availability import no_key_message
        return "" if self.llm_available() else no_key_message(self.config.llm)

    # ------------------------------------------------------------------------------ describe

    def describe(self, spec: SessionSpec) -> SessionPlan:
        """Resolve a spec against the session's stored settings (on a resume), the config and the defaults.
        Raises KbenchError for anything a person must fix (unknown task, proposer, bad numbers)."""
        from engine.evolve.operators import DEFAULT_WEIGHTS, parse_weights
        from engine.tasks.loader import load_task

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
        from engine.integrity.policy import resolve_policy
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
    def _default_name(task: Any, direction: str, proposer: str) -> str:
        return f"{task.name}-{'bwd' if direction == 'backward' else 'fwd'}-{proposer}"

    def task_of(self, session: str) -> Any:
        """The task a session evolves: its recorded copy when its folder still exists, else by name."""
        from engine.tasks.loader import load_task
        from engine.tasks.model import Task

        raw = self.ws._session_json(session)  # noqa: SLF001 - the session's own record of its task
        tj = raw.get("task_json") or {}
        if tj and Path(str(tj.get("root", ""))).exists():
            return Task.from_json(tj)
        return load_task(raw.get("task") or self.ws.session(session).task)

    # ------------------------------------------------------------------------------ start / resume

    def start(self, spec: SessionSpec, *, on_event: Callable[[Any], None] | None = None, paused: bool = False,
              on_unavailable: str = "stop", sequential: bool = False, background: bool = True,
              proposer: Any = None) -> RunningSession:
        """Build and start (on its own thread, unless `background` is False) the session the spec describes;
        a session of that name is resumed. Events go to `on_event` on the loop's thread. `proposer`: one the
        front end built itself (the app's human proposer, whose editor the app must run)."""
        from engine.evolve.loop import Budgets, EvolutionSession
        from engine.evolve.operators import OperatorPolicy
        from engine.llm.accounting import CostLedger

        from engine.evolve.checks import session_checks

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

    def _evaluator(self, task: Any, direction: str, sequential: bool) -> Any:
        if self.evaluator_factory is default_evaluator_factory:
            return default_evaluator_factory(task, direction, self.config, sequential=sequential)
        return self.evaluator_factory(task, direction, self.config)

    def make_evaluator(self, task: Any, direction: str) -> Any:
        return self._evaluator(task, direction, False)

    def _llm_client(self, ledger: Any) -> Any:
        from engine.llm.client import make_client
        kw = {"env": self.env, **self.llm_options} if self.env is not None else dict(self.llm_options)
        return make_client(self.config.llm, ledger, **kw)

    def _proposer(self, plan: SessionPlan, ledger: Any) -> Any:
        from engine.proposers import make_proposer
        from engine.proposers.replay import ReplayProposer

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

    def _verifier(self, plan: SessionPlan, ledger: Any, proposer: Any) -> Callable[[Any], Any]:
        from engine.llm.verifiers import verify

        client = getattr(proposer, "client", None) or self._llm_client(ledger)
        config, task, direction = self.config, plan.task, plan.direction
        return lambda cand: verify(client, config, task, direction, cand)

    def _target_text(self) -> str:
        target = self._target
        if target is None:
            target = probed_target()
        elif callable(target):
            target = target()
        return target.describe() if hasattr(target, "describe") else str(target or "")

    # ------------------------------------------------------------------------------ re-evaluation

    def reevaluation_targets(self, target: str, all_: bool = False) -> tuple[Any, list[Any]]:
        """(session info, candidate views) for `kbench reevaluate TARGET`: a candidate, or a session's measured
        (or, with all_, every) candidates."""
        from engine.verdict import Status

        sessions = {s.name: s for s in self.ws.sessions()}
        if target in sessions:
            info = sessions[target]
            views = self.ws.candidates(info.name, strict=False)
            damaged = [v for v in views if v.problem]
            if damaged and not self.ws.accept_damage:  # named, never re-evaluated over in silence
                raise KbenchError(damaged[0].problem)
            if not all_:
                views = [v for v in views if v.status.measurement is not None or v.problem
                         or v.status.status_of("correctness") == Status.PASS]
            return info, views
        view = self.ws.view(target)
        return self.ws.session(view.record.session), [view]

    def reevaluate(self, target: str, *, all_: bool = False, by: str = "reevaluate",
                   evaluator: Any = None, take_over: bool = False) -> Iterator[Reevaluated]:
        """Evaluate again and append the verdicts, the measurement and a `reevaluated` event (nothing is
        rewritten), as the session's one writer. Yields one Reevaluated per candidate as it finishes.

        With `[eval] profile = "best"` the evaluations leave the profile stage out; it then runs on its own
        for a candidate asked for by id (on demand), and for one that becomes the session's new best when a
        whole session is re-evaluated ("all": inside every evaluation; "off": never)."""
        info, views = self.reevaluation_targets(target, all_)
        if not views:
            return
        task = self.task_of(info.name)
        claim = self.ws.claim(info.name, "kbench reevaluate", take_over=take_over)
        own = evaluator is None
        by_id = target != info.name
        try:
            if own:
                evaluator = self.make_evaluator(task, info.direction)
            best = self.ws.best(info.name)
            best_id = best.id if best is not None else None
            files = {v.id: self.ws.files(v.id) for v in views}
            futs = [(v, evaluator.submit(files[v.id])) for v in views]
            for v, fut in futs:
                out = fut.result()
                r = self.record_reevaluation(v, out, by)
                if self.config.eval.profile == "best":
                    now = self.ws.best(info.name)
                    if by_id or (now is not None and now.id == v.id and now.id != best_id):
                        r = self.profile_reevaluated(r, evaluator, files[v.id], by)
                    best_id = now.id if now is not None else None
                yield r
        finally:
            try:
                if own and evaluator is not None:
                    evaluator.close()
            finally:
                claim.release()

    def record_reevaluation(self, view: Any, outcome: Any, by: str) -> Reevaluated:
        notes = outcome.reevaluation_notes(by=by)
        status = self.ws.record(view.id, notes) if notes else self.ws.status(view.id)
        return Reevaluated(view.id, view.status.speedup, status, outcome)

    def profile_reevaluated(self, r: Reevaluated, evaluator: Any, candidate: Any, by: str) -> Reevaluated:
        """The profile stage on its own for a candidate just re-evaluated (where it passed and its evaluation
        did not profile it), its verdict appended to the note."""
        from dataclasses import replace

        from engine.evolve.outcome import profile_now
        verdict = profile_now(evaluator, candidate, r.outcome)
        if verdict is None:
            return r
        return replace(r, status=self.ws.record_verdict(r.id, verdict, by=by), profile=verdict)

