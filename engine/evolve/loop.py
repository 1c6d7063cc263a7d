"""The evolution loop: one session of one task direction, resumable from the workspace alone.

    seed (generation 0: the task's baseline, else translations)
    for each generation 1..N:  choose operator per slot ─▶ select parents ─▶ propose ─▶ commit
                               ─▶ static / LLM checks (a rejection never reaches the GPU)
                               ─▶ evaluator (compile on CPU, check + time on GPU, pipelined)
                               ─▶ verdict notes + measurement + `evaluated` event ─▶ best moves the branch
                               ─▶ a new best: its `profile` stage on the evaluator's GPU ─▶ its verdict note

This module holds the run (open or resume, the main loop, what comes back through the inbox, its stop conditions
and budgets, the background thread). The session is composed of parts it owns, each with its own state:
controls.py (a UI's controls, the inbox, how the run ends, the pool), evaluations.py (what the evaluator is
working on), recorder.py (events and notes), gate.py (before the GPU: dedup, static and LLM checks) and
proposing.py (slot to proposal to commit); planner.py decides operator and parents per slot (pure).

All workspace writes happen on the loop's own thread; the evaluator's threads only hand results back
through a queue. Controls (`pause`, `resume`, `step`, `stop`) are thread-safe flags, so a UI can drive the
loop from another thread; progress goes out as typed events (engine.evolve.events) to subscribers.

Generations are synchronous: the slots of generation g are proposed from candidates evaluated before g,
all submitted at once (so compiles overlap GPU work), and g+1 starts when every candidate of g is finished.
Within a generation up to `Budgets.proposals_in_flight` proposals (and the LLM verifiers of committed
candidates) run on a small thread pool while the evaluator measures earlier slots, so neither the LLM nor
the GPU waits on the other more than the generation barrier requires.

Profiling (`profile`): "best" (the default) asks the evaluator to profile a candidate when it becomes the
session's new best, and writes the `profile` verdict to its note (the mutate prompt reads it back as the
parent's feedback); a generation waits for those profiles as for its evaluations. "all" profiles every
candidate that passes: the evaluator's options do that inside each evaluation (engine.evolve.factory), and
the loop asks for any passing one whose outcome came back without it. "off" asks for none.

LLM failures end honestly: a proposer's `stop` (the API refused the request, the key, the budget) stops the
run with its reason; an API outage that outlasts `[llm] outage_minutes` (`unavailable`) pauses it as "API
unavailable" (the run ends, resumable, with `on_unavailable="stop"`; it waits for `resume()` with "pause"),
and the attempt does not count against the search. A proposal that produced nothing is written to the
session's note as `proposal_failed` with its tokens and dollars, so a resumed session counts that spend.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from engine.config.sections import profile_mode
from engine.errors import KbenchError, storage_error
from engine.evolve import events as ev
from engine.evolve.checks import DEFAULT_CHECKS
from engine.evolve.controls import WAKE, Controls, InboxItem, Pool
from engine.evolve.evaluations import Evaluations
from engine.evolve.gate import Check, PreGpuGate, Verifier
from engine.evolve.operators import OperatorPolicy, default_policy
from engine.evolve.outcome import PROFILE_STAGE, EvalOutcome, Evaluator, needs_profile
from engine.evolve.planner import BASELINE, Budgets, GenerationPlanner
from engine.evolve.population import DONE, PENDING, Member, Population
from engine.evolve.preflight import check_can_start
from engine.evolve.proposing import Proposing
from engine.evolve.recorder import Recorder
from engine.evolve.resume import API_UNAVAILABLE, load_state, member_from_view, proposal_costs
from engine.evolve.search_state import restore_search_state, search_state
from engine.gpu_wait import HOW_TO_GO_ON, WAITING_FOR_GPU
from engine.proposers.base import Proposer
from engine.tasks.model import Task
from engine.verdict import Stage, Status, Verdict

if TYPE_CHECKING:
    from engine.workspace import Workspace
    from engine.workspace.writers import Claim

__all__ = ["Budgets", "EvolutionSession"]


class Ledger(Protocol):
    """The LLM cost ledger the loop reads its dollar budget from (engine.llm.accounting.CostLedger)."""

    @property
    def spent_usd(self) -> float: ...

    @property
    def budget_usd(self) -> float | None: ...


class EvolutionSession:
    """Evolve candidates for `task`/`direction` in workspace session `session` (created, or resumed).

    Its parts, each owning its state: `controls` (a UI's controls, the inbox, how the run ends), `evaluations`
    (what the evaluator works on), `recorder` (events and notes), `gate` (the pre-GPU checks) and `proposing`
    (slots to proposals to commits); the planner decides what fills a slot."""

    def __init__(self, workspace: Workspace, session: str, task: Task, proposer: Proposer, evaluator: Evaluator, *,
                 direction: str = "forward", budgets: Budgets | None = None, policy: OperatorPolicy | None = None,
                 ledger: Ledger | None = None, checks: Sequence[Check] | None = None,
                 verifier: Verifier | None = None,
                 use_baseline: bool = True, hints: str = "", seed: int = 0, model: str | None = None,
                 clock: Callable[[], float] = time.monotonic, poll_s: float = 0.05,
                 session_config: dict[str, Any] | None = None, on_unavailable: str = "stop",
                 profile: str = "best"):
        self.profile = profile_mode(profile, "profile")   # best | all | off (engine.config; booleans: all | off)
        self.on_unavailable = on_unavailable               # "stop": end the run (resumable); "pause": wait
        self.ws, self.session, self.task, self.direction = workspace, session, task, direction
        self.proposer, self.model = proposer, model
        self.budgets = budgets or Budgets()
        self.policy = policy or default_policy(proposer.name)
        self.ledger = ledger
        self.use_baseline = use_baseline
        self.rng = random.Random(seed)
        self.clock = clock
        self.session_config = session_config or {}
        self.planner = GenerationPlanner(
            self.policy, self.rng, self.budgets, proposer_name=proposer.name,
            seeds_with_baseline=use_baseline and task.baseline_dir(direction) is not None,
            supported=frozenset(proposer.operators or ()) or None)
        self.population = Population()
        self.generation = 0
        self.spent_before = 0.0                            # LLM dollars spent by earlier runs of the session

        self.controls = Controls(poll_s)
        self.pool = Pool(self.budgets.proposals_in_flight, f"kbench-propose-{session}")
        self.recorder = Recorder(workspace, session, self.population, self.controls, type(evaluator).__name__,
                                 self.budgets.infra_failures_in_a_row)
        self.evaluations = Evaluations(evaluator, workspace, session, self.controls, self.recorder.emit)
        self.gate = PreGpuGate(workspace, session, task, direction, DEFAULT_CHECKS if checks is None else checks,
                               verifier, self.population, self.evaluations, self.recorder, self.controls, self.pool,
                               self._outage)
        self.proposing = Proposing(workspace, session, task, direction, proposer, hints, model, self.planner,
                                   self.population, self.evaluations, self.gate, self.recorder, self.controls,
                                   self.pool, lambda gen, parents: search_state(self, gen, parents), self._outage)

        self._stepping = False
        self._t0 = 0.0
        self._thread: threading.Thread | None = None
        self._finished = threading.Event()         # set when the background run has ended (see join)
        self._claim: Claim | None = None           # this process's claim on the session (the one writer)
        self._created = False                      # this run created the session (a failed start removes it)
        self.result: ev.Stopped | None = None
        self.error: Exception | None = None        # a KbenchError that ended a background run (see start)

    @property
    def evaluator(self) -> Evaluator:
        return self.evaluations.evaluator

    @property
    def verifier(self) -> Verifier | None:
        return self.gate.verifier

    @property
    def directives(self) -> str:
        return self.proposing.directives

    @property
    def evaluated(self) -> int:
        """Candidates this run finished (judged, rejected before the GPU, or lost by the executor)."""
        return self.recorder.evaluated

    # -- controls, for a UI on another thread ------------------------------------------------------

    def subscribe(self, callback: Callable[[ev.EvolveEvent], None]) -> None:
        self.recorder.subscribe(callback)

    def event_queue(self):
        return self.recorder.event_queue()

    def pause(self, reason: str = "") -> None:
        self.controls.pause(reason)

    def resume(self) -> None:
        self.controls.resume()

    def step(self, n: int = 1) -> None:
        """While paused: let `n` more proposals through (each evaluated), then stay paused."""
        self.controls.step(n)

    def stop(self, wait_for_evaluations: bool = True) -> None:
        """Stop proposing. With `wait_for_evaluations` the running evaluations finish and are recorded;
        without, queued ones are cancelled and running ones abandoned (their candidates stay pending in the
        workspace and are re-queued on resume)."""
        self.controls.stop(wait_for_evaluations)

    def notice(self, candidate_id: str) -> None:
        """Something changed a candidate of this session behind the loop's back (a person's override, a
        re-measurement, a hand edit committed by the app): re-read it from the workspace. Thread-safe.

        A member that is no longer blocked and has no measurement goes (back) to the evaluator; a finished
        one takes its new fitness (an override to `suspicious` takes it out of the parent pool); a new
        candidate of this session joins the population, and is evaluated here if it has not been yet."""
        self.controls.put("notice", candidate_id, None)

    requeue = notice   # the older name: after an override of a pre-GPU rejection

    @property
    def paused(self) -> bool:
        return self.controls.flags.paused

    @property
    def pause_reason(self) -> str:
        return self.controls.pause_reason

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._finished.is_set()

    def claim(self, take_over: bool = False, command: str = "kbench evolve") -> None:
        """Become the session's one writer (engine.workspace.writers) until the run ends. A front end calls
        this before `start` to hear a refusal at once (SessionBusyError names the holder); `run` claims the
        session itself otherwise."""
        if self._claim is None and hasattr(self.ws, "claim"):
            self._claim = self.ws.claim(self.session, command, take_over=take_over)

    def start(self) -> threading.Thread:
        """Run the loop on a background thread; returns it. Events tell what happens; a KbenchError that
        ends the run is kept in `error` (and in the Stopped event's reason), not printed as a traceback."""
        self._finished.clear()
        self._thread = threading.Thread(target=self._run_in_thread, name=f"kbench-evolve-{self.session}",
                                        daemon=True)
        self._thread.start()
        return self._thread

    def _run_in_thread(self) -> None:
        try:
            self.run()
        except KbenchError as exc:
            self.error = exc
        finally:
            self._finished.set()

    def join(self, timeout: float | None = None) -> ev.Stopped | None:
        """Wait for the background run to end (or `timeout`). An Event, not Thread.join: on Python 3.11 a
        Thread.join interrupted by Ctrl-C leaves the thread looking finished while it still runs, and the CLI
        then exited without waiting for the loop to stop and say so."""
        if self._thread is not None:
            self._finished.wait(timeout)
        return self.result

    # ---------------------------------------------------------------------------------------- run

    def run(self) -> ev.Stopped:
        stopped: ev.Stopped | None = None
        try:
            self.claim()
            self._open()
            stopped = self._main()
        except BaseException as exc:
            self.controls.flags.abandon.set()
            failure = storage_error(exc) if isinstance(exc, OSError) else None   # a full or read-only disk
            why = str(failure or exc) if failure is not None or isinstance(exc, KbenchError) else repr(exc)
            stopped = ev.Stopped(self.session, reason=f"error: {why}", completed=False,
                                 evaluated=self.recorder.evaluated)
            if failure is not None:
                raise failure from None   # a KbenchError: one line, the session resumable as it stands
            raise
        finally:
            self._shutdown()
            self._discard_if_empty()
            claim, self._claim = self._claim, None
            if claim is not None:
                claim.release()
            best = self.population.best()
            assert stopped is not None
            stopped = ev.Stopped(self.session, reason=stopped.reason, completed=stopped.completed,
                                 evaluated=self.recorder.evaluated, best=best.id if best else None,
                                 best_speedup=best.speedup if best else None, paused=self.controls.stop_paused,
                                 waiting_for_gpu=len(self.population.waiting()))
            self.result = stopped
            self.recorder.emit(stopped)
        return stopped

    def _discard_if_empty(self) -> None:
        """A session this run created that holds no candidate (its start failed: the proposer stopped, an
        error) is removed, so a failed start leaves no empty session behind."""
        if not self._created or len(self.population) or self.ws.failed.list(self.session):
            return      # candidates, or paid-for answers kept under the session (engine.workspace.failed)
        try:
            if self.ws.discard_empty_session(self.session):
                self.recorder.emit(ev.Log(self.session, level="warning", message=(
                    f"session {self.session} was not kept: nothing was committed to it")))
        except Exception as exc:  # noqa: BLE001 - a cleanup failure must not hide why the run ended
            self.recorder.emit(ev.Log(self.session, level="warning", message=f"could not remove the empty session: {exc}"))

    def _open(self) -> None:
        names = {s.name for s in self.ws.sessions()}
        resumed = self.session in names
        if resumed:
            info = self.ws.session(self.session)
            if info.task != self.task.name or info.direction != self.direction:
                raise KbenchError(f"session {self.session!r} evolves {info.task} {info.direction}, not "
                                  f"{self.task.name} {self.direction}; choose another --session")
            state = load_state(self.ws, self.session)
            self.population.members.update(state.population.members)   # the parts hold this population
            self.proposing.directives = state.directives
            self.generation = state.generation
            self.spent_before = state.spent_usd + proposal_costs(
                self.ws, [m for m in self.population if m.operator not in (BASELINE, "tune")])
            requeue = state.requeue
            finished = state.finished
            restore_search_state(self)
            moved = self.ws.restore_branch(self.session) if hasattr(self.ws, "restore_branch") else None
            if moved:    # left missing or behind by the run that was interrupted
                self.recorder.emit(ev.Log(self.session, level="warning", message=moved))
        else:
            check_can_start(self.task, self.direction, self.proposer, self.policy, self.use_baseline)
            self.ws.start_session(self.session, self.task, direction=self.direction,
                                  proposer=self.proposer.name, model=self.model,
                                  config=self.session_config)
            self._created = True
            requeue, finished = [], 0
        limit = getattr(self.ledger, "limit", None)
        if limit is not None:       # the ledger holds every call to the session's budget, earlier runs counted
            limit(self.budgets.usd if self.budgets.usd is not None else self.ledger.budget_usd, self.spent_before)
        self.pool.open()
        self._t0 = self.clock()
        self.recorder.emit(ev.SessionStarted(self.session, task=self.task.name, direction=self.direction,
                                     proposer=self.proposer.name, resumed=resumed,
                                     finished=finished, requeued=len(requeue), generation=self.generation))
        for cid in requeue:
            self.gate.checked_before_gpu(self.population.members[cid])

    def _main(self) -> ev.Stopped:
        announced_pause, flags = False, self.controls.flags
        while True:
            self._drain(block=False)
            if flags.stop.is_set():
                return self._stopping(self.controls.stop_reason or "stopped by request", completed=False)
            with flags.lock:
                paused, steps = flags.paused, flags.steps
            if paused and steps <= 0:
                if (not announced_pause and not self._stepping) or (self._stepping and not self._busy()):
                    announced_pause, self._stepping = True, False
                    self.recorder.emit(ev.Paused(self.session, in_flight=len(self.evaluations.in_flight),
                                                 reason=self.controls.pause_reason))
                self._drain(block=True)
                continue
            if announced_pause and not paused:
                announced_pause = False
                self.recorder.emit(ev.Resumed(self.session))
                self.gate.release_held()
            if paused and self._busy():
                self._drain(block=True)  # a single step runs to its end before the next one
                continue
            exhausted = self._budget_left()
            if exhausted:
                self.recorder.emit(ev.BudgetExhausted(self.session, budget=exhausted[0], detail=exhausted[1]))
                return self._stopping(f"{exhausted[0]} budget reached", completed=True)
            gen = self.generation
            if gen > self.budgets.generations:
                return self._stopping(f"all {self.budgets.generations} generation(s) done", completed=True)
            if self.planner.can_fill(gen, self.population, self.proposing.slots_in_flight(),
                                     len(self.evaluations.in_flight), self.evaluations.capacity):
                if paused:
                    with flags.lock:
                        flags.steps -= 1
                    self._stepping = True
                self.proposing.fill_one(gen)
                continue
            members = self.population.in_generation(gen)
            for m in members:
                if m.state == PENDING and m.id not in self.evaluations.in_flight and not self.gate.waiting(m.id):
                    self.evaluations.submit(m)   # its evaluation was cancelled under us: it is still owed one
            if any(m.state == PENDING for m in members) or self._busy():
                self._drain(block=True)
                continue
            done = [m for m in members if m.state == DONE]
            best = self.population.best()
            self.recorder.emit(ev.GenerationFinished(self.session, generation=gen, candidates=len(done),
                                             best=best.id if best else None,
                                             best_speedup=best.speedup if best else None,
                                             waiting_for_gpu=sum(m.waiting for m in done)))
            waiting = self._waiting_stop(gen, produced=bool(done))
            if waiting is not None:
                return waiting
            if not members and self.recorder.failed_in_generation.get(gen):
                return self._stopping(self._no_usable_answer(gen), completed=False)
            if not done and gen > 0 and not self.population.eligible():
                last = next((m for m in reversed(list(self.population)) if m.failed_stage), None)
                why = f" ({last.id} failed at {last.failed_stage}: {last.reason})" if last else ""
                return self._stopping(f"no eligible candidate to evolve from{why}", completed=False)
            if not done and gen > 0:
                self.recorder.emit(ev.BudgetExhausted(self.session, budget="search_space",
                                              detail=f"generation {gen}: the proposer had nothing new"))
                return self._stopping("the search space is spent", completed=True)
            if not done and gen == 0:
                return self._stopping("generation 0 produced no candidate (no baseline, no translation)",
                                      completed=False)
            self.generation = gen + 1

    def _no_usable_answer(self, gen: int) -> str:
        """Why a generation got no candidate at all: every proposal failed. One line: who, how many tries, the
        reasons (most frequent first), and where the answers are kept."""
        reasons = self.recorder.failed_in_generation[gen]
        counts: dict[str, int] = {}
        for r in reasons:
            key = " ".join(r.split())[:160]
            counts[key] = counts.get(key, 0) + 1
        why = "; ".join(f"{n}x {r}" if n > 1 else r for r, n in sorted(counts.items(), key=lambda kv: -kv[1])[:3])
        who = "the LLM" if getattr(self.proposer, "client", None) is not None else f"the {self.proposer.name} proposer"
        return (f"{who} gave no usable answer in {len(reasons)} tr{'y' if len(reasons) == 1 else 'ies'} "
                f"(generation {gen}): {why}; the answers are kept: kbench log {self.session}")

    def _waiting_stop(self, gen: int, produced: bool) -> ev.Stopped | None:
        """After generation `gen`: stop where nothing is measured and nothing more may be queued (engine.gpu_wait:
        one generation ahead of the measurements), saying what waits for a GPU and how to go on."""
        waiting = self.population.waiting()
        if not waiting or self.population.eligible():
            return None
        if (gen < self.budgets.generations and (produced or gen == 0)
                and self.population.queueable(before=gen + 1)):
            self.recorder.emit(ev.Log(self.session, message=(
                f"nothing is measured yet ({len(waiting)} candidate(s) {WAITING_FOR_GPU}): generation {gen + 1} "
                "is proposed from them and compiled, then queued for a GPU")))
            return None
        newest = max(m.generation for m in waiting)
        return self._stopping(f"{WAITING_FOR_GPU}: {len(waiting)} candidate(s) compiled and queued, up to "
                              f"generation {newest}; {HOW_TO_GO_ON}", completed=False)

    def _stopping(self, reason: str, completed: bool) -> ev.Stopped:
        flags = self.controls.flags
        flags.stop.set()        # results still arriving are committed, not taken further
        if flags.abandon.is_set():
            self.evaluations.cancel_pending()
        else:
            while self._busy() and not flags.abandon.is_set():
                self._drain(block=True)
            if flags.abandon.is_set():
                self.evaluations.cancel_pending()
        return ev.Stopped(self.session, reason=reason, completed=completed, paused=self.controls.stop_paused)

    def _busy(self) -> bool:
        """Work under way that will report back: evaluations, profiles, proposals, LLM reviews."""
        return self.evaluations.busy() or self.proposing.busy() or self.gate.busy()

    def _shutdown(self) -> None:
        try:
            self.evaluations.cancel_pending() if self.controls.abandoned else None
        except Exception:  # noqa: BLE001
            pass
        self.pool.shutdown()

    # ----------------------------------------------------------------------------------- budgets

    def spent_usd(self) -> float:
        """LLM dollars spent by this session: before this run (from the workspace) plus this run's ledger."""
        spent = self.ledger.spent_usd if self.ledger is not None else 0.0
        return self.spent_before + float(spent or 0.0)

    def _budget_left(self) -> tuple[str, str] | None:
        limit = self.budgets.usd
        if limit is None and self.ledger is not None:
            limit = self.ledger.budget_usd
        if limit is not None and not math.isinf(limit):
            spent = self.spent_usd()
            if spent >= limit:
                return "usd", f"${spent:.2f} of ${limit:.2f}"
            if self.controls.usd_out:       # a call did not fit in what is left: the budget is as good as spent
                return "usd", self.controls.usd_out.removeprefix("session budget reached: ")
        if self.budgets.wall_s is not None:
            elapsed = self.clock() - self._t0
            if elapsed >= self.budgets.wall_s:
                return "wall_time", f"{elapsed:.0f}s of {self.budgets.wall_s:.0f}s"
        return None

    # ------------------------------------------------------------------------------- the inbox

    def _drain(self, block: bool) -> None:
        """Handle everything the other threads handed back. With `block`, wait a little for something first."""
        for item in self.controls.take(block):
            self._handle(item)

    def _handle(self, item: InboxItem) -> None:
        kind, key, payload = item
        if kind == WAKE:
            return
        if kind == "proposal":
            self.proposing.returned(key, payload)
        elif kind == "verified":
            self.gate.verified(key, *payload)
        elif kind == "profiled":
            self._profiled(key, payload)
        elif kind == "notice":
            self._notice(key)
        elif kind == "stage":
            m = self.population.get(key)
            if m is not None and m.state != DONE:
                self.recorder.stage(key, payload)
        elif kind == "done":
            self._evaluated(key, payload)

    def _evaluated(self, cid: str, fut: Future[EvalOutcome]) -> None:
        self.evaluations.returned(cid)
        m = self.population.get(cid)
        if m is None or m.state == DONE or fut.cancelled():
            return  # a cancelled one stays pending in the workspace; a resume re-queues it
        try:
            out = fut.result()
        except Exception as exc:  # noqa: BLE001 - an evaluator bug is this candidate's failure
            out = EvalOutcome([Verdict(Stage.CORRECTNESS, Status.FAIL, f"evaluator error: {exc!r}")])
        new_best = self.recorder.outcome(m, out)
        # its profile stage, where the mode calls for it and the evaluation did not run it: "best" for a new
        # best, "all" for any that passed; the verdict comes back through the inbox
        if self.profile != "off" and (self.profile == "all" or new_best) and needs_profile(out):
            self.evaluations.profile(m, dict(out.device or {}), "new best" if new_best else "passed")

    def _profiled(self, cid: str, fut: Future[Verdict]) -> None:
        self.evaluations.profiled(cid)
        if fut.cancelled() or self.controls.abandoned:
            return
        try:
            verdict = fut.result()
        except Exception as exc:  # noqa: BLE001 - an evaluator bug: profiling is feedback, never a failure
            verdict = Verdict(PROFILE_STAGE, Status.SKIPPED, f"profiling failed: {exc!r}")
        self.recorder.profile(cid, verdict)

    def _notice(self, cid: str) -> None:
        if cid in self.evaluations.in_flight:
            return          # its evaluation is running here: the result will be re-read when recorded
        try:
            view = self.ws.view(cid)
        except KbenchError as exc:
            self.recorder.emit(ev.Log(self.session, message=f"{cid}: cannot re-read it: {exc}", level="warning"))
            return
        if view.record.session != self.session:
            return
        fresh, finished = member_from_view(view)
        m = self.population.get(fresh.id)
        if m is None:
            self._joined(fresh, finished, view.record.proposer)
            return
        if finished:
            self._reread(m, fresh)
            return
        if m.state == DONE:
            self.recorder.reopened(m)
            m.state, m.rejected, m.failed_stage, m.reason = PENDING, False, None, ""
            self.recorder.emit(ev.Log(self.session, message=f"{m.id}: override seen, sent to the evaluator"))
            self.evaluations.submit(m)
        elif not m.rejected and m.state == PENDING:     # (one in flight returned above)
            self.evaluations.submit(m)

    def _joined(self, fresh: Member, finished: bool, proposer: str) -> None:
        """A candidate of this session committed by another hand (the app's hand edit): it joins the population,
        and is evaluated here if it has not been yet."""
        m = self.population.add(fresh)
        for p in m.parents:
            if p in self.population.members:
                self.population.members[p].times_parent += 1
        self.recorder.emit(ev.CandidateCommitted(self.session, candidate=m.id, generation=m.generation,
                                                 operator=m.operator, parents=m.parents, title=m.title))
        if finished:
            return
        self.recorder.emit(ev.Log(self.session, message=f"{m.id}: joined the session ({proposer}), sent to the "
                                                        "evaluator"))
        self.evaluations.submit(m)

    def _reread(self, m: Member, fresh: Member) -> None:
        """A finished member re-read: it takes its new fitness (an override to `suspicious` takes it out of the
        parent pool)."""
        if fresh.rejected:
            self.recorder.emit(ev.Log(self.session, level="warning", message=(
                f"{m.id} is still blocked at {fresh.failed_stage}: not re-queued")))
        changed = (m.eligible, m.speedup) != (fresh.eligible, fresh.speedup)
        m.state, m.speedup, m.eligible = DONE, fresh.speedup, fresh.eligible
        m.failed_stage, m.reason, m.rejected = fresh.failed_stage, fresh.reason, fresh.rejected
        if changed:
            what = f"{m.speedup:.3f}x" if m.eligible and m.speedup else f"not eligible ({m.failed_stage})"
            self.recorder.emit(ev.Log(self.session, message=f"{m.id}: re-read from the workspace: now {what}"))

    def _outage(self, reason: str) -> None:
        """The LLM API stayed unavailable for the whole outage window: pause the session. Nothing was decided,
        nothing counts against the search; the same command (or resume in the app) carries on."""
        first = not (self.controls.stop_paused or self.controls.flags.paused)
        if first:
            try:
                self.ws.record_session_event(self.session, API_UNAVAILABLE, {"reason": reason[:500]})
            except Exception:  # noqa: BLE001
                pass
            self.recorder.emit(ev.Log(self.session, level="error", message=reason))
        if self.on_unavailable == "pause":
            if first:
                self.pause(reason)
            return
        self.controls.end(f"{reason}; paused: nothing was counted against the search, run the same command to "
                          "resume", paused=True)
