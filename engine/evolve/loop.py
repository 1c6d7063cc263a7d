"""The evolution loop: one session of one task direction, resumable from the workspace alone.

    seed (generation 0: the task's baseline, else translations)
    for each generation 1..N:  choose operator per slot ─▶ select parents ─▶ propose ─▶ commit
                               ─▶ static / LLM checks (a rejection never reaches the GPU)
                               ─▶ evaluator (compile on CPU, check + time on GPU, pipelined)
                               ─▶ verdict notes + measurement + `evaluated` event ─▶ best moves the branch
                               ─▶ a new best: its `profile` stage on the evaluator's GPU ─▶ its verdict note

This module holds the run (open or resume, the main loop, its stop conditions and budgets); the steps are in
planner.py (operator and parents per slot: pure), proposing.py (the request and the answer), gate.py (dedup,
static / LLM checks), recorder.py (commits, notes, events) and controls.py (controls, threads, the inbox).

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

import itertools
import math
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from engine.config.sections import profile_mode
from engine.errors import KbenchError, storage_error
from engine.evolve import events as ev
from engine.evolve.checks import DEFAULT_CHECKS
from engine.evolve.controls import DaemonPool, Flags, SessionControls
from engine.evolve.gate import PreGpuGate
from engine.evolve.loop_state import Check, Ledger, Verifier
from engine.evolve.operators import OperatorPolicy, default_policy
from engine.evolve.outcome import Evaluator, HasCapacity
from engine.evolve.planner import BASELINE, Budgets, GenerationPlanner
from engine.evolve.population import DONE, PENDING, Population
from engine.evolve.preflight import check_can_start
from engine.evolve.proposing import ProposalFlow
from engine.evolve.recorder import SessionRecorder
from engine.evolve.resume import load_state, proposal_costs
from engine.evolve.search_state import restore_search_state
from engine.gpu_wait import HOW_TO_GO_ON, WAITING_FOR_GPU
from engine.proposers.base import Proposer
from engine.tasks.model import Task

if TYPE_CHECKING:
    from engine.workspace import Workspace

__all__ = ["Budgets", "EvolutionSession"]


class EvolutionSession(SessionControls, ProposalFlow, PreGpuGate, SessionRecorder):
    """Evolve candidates for `task`/`direction` in workspace session `session` (created, or resumed).

    The parts: controls and threads (engine.evolve.controls), proposals (proposing, which asks the pure
    planner what fills a slot), the pre-GPU gate (gate) and the recorder of events and notes (recorder)."""

    def __init__(self, workspace: Workspace, session: str, task: Task, proposer: Proposer, evaluator: Evaluator, *,
                 direction: str = "forward", budgets: Budgets | None = None, policy: OperatorPolicy | None = None,
                 ledger: Ledger | None = None, checks: Sequence[Check] | None = None,
                 verifier: Verifier | None = None,
                 use_baseline: bool = True, hints: str = "", seed: int = 0, model: str | None = None,
                 clock: Callable[[], float] = time.monotonic, poll_s: float = 0.05,
                 session_config: dict[str, Any] | None = None, on_unavailable: str = "stop",
                 profile: str = "best"):
        self.profile = profile_mode(profile, "profile")   # best | all | off (engine.config; booleans: all | off)
        self.ws = workspace
        self.session = session
        self.task = task
        self.direction = direction
        self.proposer = proposer
        self.evaluator = evaluator
        self.budgets = budgets or Budgets()
        self.policy = policy or default_policy(proposer.name)
        self.ledger = ledger
        self.checks = list(DEFAULT_CHECKS if checks is None else checks)
        self.verifier = verifier
        self.use_baseline = use_baseline
        self.hints = hints
        self.rng = random.Random(seed)
        self.model = model
        self.clock = clock
        self.poll_s = poll_s
        self.session_config = session_config or {}
        self.planner = GenerationPlanner(
            self.policy, self.rng, self.budgets, proposer_name=proposer.name,
            seeds_with_baseline=use_baseline and task.baseline_dir(direction) is not None,
            supported=frozenset(proposer.operators or ()) or None)
        self.population = Population()
        self.directives = ""
        self.generation = 0
        self.spent_before = 0.0
        self._flags = Flags()
        self._subs = []
        self._inbox = queue.Queue()
        self._in_flight = {}
        self._profiling = {}
        self._recorded = {}
        self._files = {}
        self._evaluated = 0
        self._infra_streak = 0
        self._failed_in_generation = {}
        self._stepping = False
        self._stop_reason = ""
        self._usd_out = ""             # why an LLM call was refused by the dollar budget (engine.llm.accounting)
        self.on_unavailable = on_unavailable
        self._stop_paused = False
        self._pause_reason = ""
        self._proposing = {}
        self._verifying = set()
        self._held = set()
        self._tokens = itertools.count(1)
        self._pool = None
        self._t0 = 0.0
        self._thread = None
        self._finished = threading.Event()
        self._claim = None
        self._created = False
        self.result = None
        self.error = None

    # ---------------------------------------------------------------------------------------- run

    def run(self) -> ev.Stopped:
        stopped: ev.Stopped | None = None
        try:
            self.claim()
            self._open()
            stopped = self._main()
        except BaseException as exc:
            self._flags.abandon.set()
            failure = storage_error(exc) if isinstance(exc, OSError) else None   # a full or read-only disk
            why = str(failure or exc) if failure is not None or isinstance(exc, KbenchError) else repr(exc)
            stopped = ev.Stopped(self.session, reason=f"error: {why}", completed=False,
                                 evaluated=self._evaluated)
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
                                 evaluated=self._evaluated, best=best.id if best else None,
                                 best_speedup=best.speedup if best else None, paused=self._stop_paused,
                                 waiting_for_gpu=len(self.population.waiting()))
            self.result = stopped
            self._emit(stopped)
        return stopped

    def _discard_if_empty(self) -> None:
        """A session this run created that holds no candidate (its start failed: the proposer stopped, an
        error) is removed, so a failed start leaves no empty session behind."""
        if not self._created or len(self.population) or self.ws.failed.list(self.session):
            return      # candidates, or paid-for answers kept under the session (engine.workspace.failed)
        try:
            if self.ws.discard_empty_session(self.session):
                self._emit(ev.Log(self.session, level="warning", message=(
                    f"session {self.session} was not kept: nothing was committed to it")))
        except Exception as exc:  # noqa: BLE001 - a cleanup failure must not hide why the run ended
            self._emit(ev.Log(self.session, level="warning", message=f"could not remove the empty session: {exc}"))

    def _open(self) -> None:
        names = {s.name for s in self.ws.sessions()}
        resumed = self.session in names
        if resumed:
            info = self.ws.session(self.session)
            if info.task != self.task.name or info.direction != self.direction:
                raise KbenchError(f"session {self.session!r} evolves {info.task} {info.direction}, not "
                                  f"{self.task.name} {self.direction}; choose another --session")
            state = load_state(self.ws, self.session)
            self.population = state.population
            self.directives = state.directives
            self.generation = state.generation
            self.spent_before = state.spent_usd + proposal_costs(
                self.ws, [m for m in self.population if m.operator not in (BASELINE, "tune")])
            requeue = state.requeue
            finished = state.finished
            restore_search_state(self)
            moved = self.ws.restore_branch(self.session) if hasattr(self.ws, "restore_branch") else None
            if moved:    # left missing or behind by the run that was interrupted
                self._emit(ev.Log(self.session, level="warning", message=moved))
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
        if self.budgets.proposals_in_flight > 1:
            self._pool = DaemonPool(self.budgets.proposals_in_flight, f"kbench-propose-{self.session}")
        self._t0 = self.clock()
        self._emit(ev.SessionStarted(self.session, task=self.task.name, direction=self.direction,
                                     proposer=self.proposer.name, resumed=resumed,
                                     finished=finished, requeued=len(requeue), generation=self.generation))
        for cid in requeue:
            self._checked_before_gpu(self.population.members[cid])

    def _main(self) -> ev.Stopped:
        announced_pause = False
        while True:
            self._drain(block=False)
            if self._flags.stop.is_set():
                return self._stopping(self._stop_reason or "stopped by request", completed=False)
            with self._flags.lock:
                paused, steps = self._flags.paused, self._flags.steps
            if paused and steps <= 0:
                if (not announced_pause and not self._stepping) or (self._stepping and not self._busy()):
                    announced_pause, self._stepping = True, False
                    self._emit(ev.Paused(self.session, in_flight=len(self._in_flight), reason=self._pause_reason))
                self._wait()
                continue
            if announced_pause and not paused:
                announced_pause = False
                self._emit(ev.Resumed(self.session))
                self._release_held()
            if paused and self._busy():
                self._wait()  # a single step runs to its end before the next one
                continue
            exhausted = self._budget_left()
            if exhausted:
                self._emit(ev.BudgetExhausted(self.session, budget=exhausted[0], detail=exhausted[1]))
                return self._stopping(f"{exhausted[0]} budget reached", completed=True)
            gen = self.generation
            if gen > self.budgets.generations:
                return self._stopping(f"all {self.budgets.generations} generation(s) done", completed=True)
            capacity = self.evaluator.capacity if isinstance(self.evaluator, HasCapacity) else None
            if self.planner.can_fill(gen, self.population, [(g, o) for g, o, _ in self._proposing.values()],
                                     len(self._in_flight), capacity):
                if paused:
                    with self._flags.lock:
                        self._flags.steps -= 1
                    self._stepping = True
                outcome = self._fill_one(gen)
                if outcome is not None:
                    return outcome
                continue
            members = self.population.in_generation(gen)
            for m in members:
                if (m.state == PENDING and m.id not in self._in_flight and m.id not in self._verifying
                        and m.id not in self._held):
                    self._submit(m)   # its evaluation was cancelled under us: it is still owed one
            if any(m.state == PENDING for m in members) or self._busy():
                self._wait()
                continue
            done = [m for m in members if m.state == DONE]
            best = self.population.best()
            self._emit(ev.GenerationFinished(self.session, generation=gen, candidates=len(done),
                                             best=best.id if best else None,
                                             best_speedup=best.speedup if best else None,
                                             waiting_for_gpu=sum(m.waiting for m in done)))
            waiting = self._waiting_stop(gen, produced=bool(done))
            if waiting is not None:
                return waiting
            if not members and self._failed_in_generation.get(gen):
                return self._stopping(self._no_usable_answer(gen), completed=False)
            if not done and gen > 0 and not self.population.eligible():
                last = next((m for m in reversed(list(self.population)) if m.failed_stage), None)
                why = f" ({last.id} failed at {last.failed_stage}: {last.reason})" if last else ""
                return self._stopping(f"no eligible candidate to evolve from{why}", completed=False)
            if not done and gen > 0:
                self._emit(ev.BudgetExhausted(self.session, budget="search_space",
                                              detail=f"generation {gen}: the proposer had nothing new"))
                return self._stopping("the search space is spent", completed=True)
            if not done and gen == 0:
                return self._stopping("generation 0 produced no candidate (no baseline, no translation)",
                                      completed=False)
            self.generation = gen + 1

    def _no_usable_answer(self, gen: int) -> str:
        """Why a generation got no candidate at all: every proposal failed. One line: who, how many tries, the
        reasons (most frequent first), and where the answers are kept."""
        reasons = self._failed_in_generation[gen]
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
            self._emit(ev.Log(self.session, message=(
                f"nothing is measured yet ({len(waiting)} candidate(s) {WAITING_FOR_GPU}): generation {gen + 1} "
                "is proposed from them and compiled, then queued for a GPU")))
            return None
        newest = max(m.generation for m in waiting)
        return self._stopping(f"{WAITING_FOR_GPU}: {len(waiting)} candidate(s) compiled and queued, up to "
                              f"generation {newest}; {HOW_TO_GO_ON}", completed=False)

    def _stopping(self, reason: str, completed: bool) -> ev.Stopped:
        self._flags.stop.set()        # results still arriving are committed, not taken further
        if self._flags.abandon.is_set():
            self.evaluator.cancel_pending()
        else:
            while self._busy() and not self._flags.abandon.is_set():
                self._drain(block=True)
            if self._flags.abandon.is_set():
                self.evaluator.cancel_pending()
        return ev.Stopped(self.session, reason=reason, completed=completed, paused=self._stop_paused)

    def _busy(self) -> bool:
        """Work under way that will report back: evaluations, profiles, proposals, LLM reviews."""
        return bool(self._in_flight or self._profiling or self._proposing or self._verifying)

    def _shutdown(self) -> None:
        try:
            self.evaluator.cancel_pending() if self._flags.abandon.is_set() else None
        except Exception:  # noqa: BLE001
            pass
        if self._pool is not None:
            self._pool.shutdown()

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
            if self._usd_out:       # a call did not fit in what is left: the budget is as good as spent
                return "usd", self._usd_out.removeprefix("session budget reached: ")
        if self.budgets.wall_s is not None:
            elapsed = self.clock() - self._t0
            if elapsed >= self.budgets.wall_s:
                return "wall_time", f"{elapsed:.0f}s of {self.budgets.wall_s:.0f}s"
        return None
