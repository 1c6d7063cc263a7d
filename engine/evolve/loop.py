"""The evolution loop: one session of one task direction, resumable from the workspace alone.

    seed (generation 0: the task's baseline, else translations)
    for each generation 1..N:  choose operator per slot ─▶ select parents ─▶ propose ─▶ commit
                               ─▶ static / LLM checks (a rejection never reaches the GPU)
                               ─▶ evaluator (compile on CPU, check + time on GPU, pipelined)
                               ─▶ verdict notes + measurement + `evaluated` event ─▶ best moves the branch
                               ─▶ a new best: its `profile` stage on the evaluator's GPU ─▶ its verdict note

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
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from engine.candidates import Candidate, load_candidate
from engine.evolve import events as ev
from engine.evolve.executor import BLOCKING, PROFILE_STAGE, EvalOutcome, Evaluator, needs_profile
from engine.evolve.operators import (
    OperatorPolicy,
    default_policy,
    insights,
    parent_summary,
)
from engine.evolve.population import DONE, PENDING, Member, Population
from engine.evolve.search_state import restore_search_state, search_state
from engine.evolve.resume import (
    API_UNAVAILABLE,
    DIRECTIVES,
    EVALUATED,
    PROPOSAL_FAILED,
    load_state,
    member_from_view,
    proposal_costs,
    title_of,
)
from engine.proposers.base import Proposal, ProposalRequest, ProposalStatus, guarded
from engine.tasks.model import Task
from engine.verdict import Status, Verdict
from engine.workspace.records import Event, VerdictNote, now_iso

Check = Callable[[Task, str, Candidate], Verdict]
BASELINE = "baseline"
REVIEWING = Verdict("llm_verify", Status.SKIPPED, "the LLM review is under way")   # a marker, never recorded


@dataclass
class Budgets:
    generations: int = 3                 # generations after generation 0 (the seeds)
    population: int = 8                  # candidates per generation
    usd: float | None = None             # LLM dollars (proposals + verifiers); None: the ledger's own budget
    wall_s: float | None = None          # wall time of this run, seconds
    attempts_per_slot: int = 3           # failed/empty proposals allowed per slot before the generation closes
    infra_failures_in_a_row: int = 5     # the executor lost this many evaluations in a row: stop, it is broken
    proposals_in_flight: int = 1         # proposals (and LLM reviews) running at once; 1: on the loop's thread


@dataclass
class _Flags:
    stop: threading.Event = field(default_factory=threading.Event)
    abandon: threading.Event = field(default_factory=threading.Event)   # stop without waiting for evaluations
    paused: bool = False
    steps: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    wake: threading.Event = field(default_factory=threading.Event)


class _DaemonPool:
    """A few daemon worker threads for proposals and reviews: a process that quits (Ctrl-C twice) does not wait
    for an LLM call still in flight, as it would for concurrent.futures' workers, which are joined at exit."""

    def __init__(self, workers: int, name: str):
        self._jobs: queue.Queue[tuple[Future, Callable[..., Any], tuple[Any, ...]] | None] = queue.Queue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        fut: Future = Future()
        self._jobs.put((fut, fn, args))
        return fut

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fut, fn, args = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever reads the future
                fut.set_exception(exc)

    def shutdown(self) -> None:
        """Cancel what has not started; running jobs finish on their own (their threads are daemons)."""
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[0].cancel()
        for _ in self._threads:
            self._jobs.put(None)


class EvolutionSession:
    """Evolve candidates for `task`/`direction` in workspace session `session` (created, or resumed)."""

    def __init__(self, workspace: Any, session: str, task: Task, proposer: Any, evaluator: Evaluator, *,
                 direction: str = "forward", budgets: Budgets | None = None, policy: OperatorPolicy | None = None,
                 ledger: Any = None, checks: Sequence[Check] | None = None,
                 verifier: Callable[[Candidate], Any] | None = None,
                 use_baseline: bool = True, hints: str = "", seed: int = 0, model: str | None = None,
                 clock: Callable[[], float] = time.monotonic, poll_s: float = 0.05,
                 session_config: dict[str, Any] | None = None, on_unavailable: str = "stop",
                 profile: str = "best"):
        from engine.config import profile_mode
        self.ws = workspace
        self.session = session
        self.task = task
        self.direction = direction
        self.proposer = proposer
        self.evaluator = evaluator
        self.budgets = budgets or Budgets()
        self.policy = policy or default_policy(getattr(proposer, "name", "anthropic"))
        self.ledger = ledger
        if checks is None:
            from engine.evolve.checks import DEFAULT_CHECKS
            checks = DEFAULT_CHECKS
        self.checks = list(checks)
        self.verifier = verifier
        self.use_baseline = use_baseline
        self.hints = hints
        self.rng = random.Random(seed)
        self.model = model
        self.clock = clock
        self.poll_s = poll_s
        self.session_config = session_config or {}
        self.profile = profile_mode(profile, "profile")   # best | all | off (engine.config; booleans: all | off)
        self.population = Population()
        self.directives = ""
        self.generation = 0
        self.spent_before = 0.0
        self._flags = _Flags()
        self._subs: list[Callable[[ev.EvolveEvent], None]] = []
        self._inbox: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        self._in_flight: dict[str, Any] = {}
        self._profiling: dict[str, Any] = {}       # candidate id -> Future[Verdict] of its profile stage
        self._recorded: dict[str, set[str]] = {}
        self._files: dict[str, Candidate] = {}
        self._attempts: dict[int, int] = {}
        self._closed_gens: set[int] = set()
        self._meta_done: dict[int, int] = {}
        self._empty_parents: dict[int, set[str]] = {}
        self._evaluated = 0
        self._infra_streak = 0
        self._stepping = False
        self._stop_reason = ""
        self.on_unavailable = on_unavailable       # "stop": end the run (resumable); "pause": wait for resume()
        self._stop_paused = False                  # the run ends as a pause (API unavailable), not a stop
        self._pause_reason = ""
        self._proposing: dict[int, tuple[int, str, list[Member]]] = {}   # token -> (generation, operator, parents)
        self._verifying: set[str] = set()          # committed, their LLM review running
        self._held: set[str] = set()               # committed, review not possible (API unavailable): resume
        self._tokens = itertools.count(1)
        self._pool: _DaemonPool | None = None
        self._t0 = 0.0
        self._thread: threading.Thread | None = None
        self._finished = threading.Event()   # set when the background run has ended (see join)
        self._claim: Any = None              # this process's claim on the session (the one writer)
        self._created = False                # this run created the session (a failed start removes it)
        self.result: ev.Stopped | None = None
        self.error: Exception | None = None  # a KbenchError that ended a background run (see start)

    # ------------------------------------------------------------------------------------- controls

    def subscribe(self, callback: Callable[[ev.EvolveEvent], None]) -> None:
        self._subs.append(callback)

    def event_queue(self) -> queue.Queue[ev.EvolveEvent]:
        q: queue.Queue[ev.EvolveEvent] = queue.Queue()
        self.subscribe(q.put)
        return q

    def pause(self, reason: str = "") -> None:
        with self._flags.lock:
            self._flags.paused = True
            self._pause_reason = reason
        self._flags.wake.set()

    def resume(self) -> None:
        with self._flags.lock:
            self._flags.paused = False
            self._flags.steps = 0
            self._pause_reason = ""
        self._flags.wake.set()

    def step(self, n: int = 1) -> None:
        """While paused: let `n` more proposals through (each evaluated), then stay paused."""
        with self._flags.lock:
            self._flags.paused = True
            self._flags.steps += n
        self._flags.wake.set()

    def stop(self, wait_for_evaluations: bool = True) -> None:
        """Stop proposing. With `wait_for_evaluations` the running evaluations finish and are recorded;
        without, queued ones are cancelled and running ones abandoned (their candidates stay pending in the
        workspace and are re-queued on resume)."""
        if not wait_for_evaluations:
            self._flags.abandon.set()
        self._flags.stop.set()
        self._flags.wake.set()

    def notice(self, candidate_id: str) -> None:
        """Something changed a candidate of this session behind the loop's back (a person's override, a
        re-measurement, a hand edit committed by the app): re-read it from the workspace. Thread-safe.

        A member that is no longer blocked and has no measurement goes (back) to the evaluator; a finished
        one takes its new fitness (an override to `suspicious` takes it out of the parent pool); a new
        candidate of this session joins the population, and is evaluated here if it has not been yet."""
        self._inbox.put(("notice", candidate_id, None))
        self._flags.wake.set()

    requeue = notice   # the older name: after an override of a pre-GPU rejection

    @property
    def paused(self) -> bool:
        return self._flags.paused

    @property
    def pause_reason(self) -> str:
        return self._pause_reason

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
        from engine.errors import KbenchError
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
        from engine.errors import KbenchError
        stopped: ev.Stopped | None = None
        try:
            self.claim()
            self._open()
            stopped = self._main()
        except BaseException as exc:
            self._flags.abandon.set()
            why = str(exc) if isinstance(exc, KbenchError) else repr(exc)
            stopped = ev.Stopped(self.session, reason=f"error: {why}", completed=False,
                                 evaluated=self._evaluated)
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
        if not self._created or len(self.population):
            return
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
                from engine.errors import KbenchError
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
        else:
            from engine.evolve.preflight import check_can_start
            check_can_start(self.task, self.direction, self.proposer, self.policy, self.use_baseline)
            self.ws.start_session(self.session, self.task, direction=self.direction,
                                  proposer=getattr(self.proposer, "name", "unknown"), model=self.model,
                                  config=self.session_config)
            self._created = True
            requeue, finished = [], 0
        if self.budgets.proposals_in_flight > 1:
            self._pool = _DaemonPool(self.budgets.proposals_in_flight, f"kbench-propose-{self.session}")
        self._t0 = self.clock()
        self._emit(ev.SessionStarted(self.session, task=self.task.name, direction=self.direction,
                                     proposer=getattr(self.proposer, "name", "unknown"), resumed=resumed,
                                     finished=finished, requeued=len(requeue), generation=self.generation))
        for cid in requeue:
            self._checked_before_gpu(self.population.members[cid])

    def _checked_before_gpu(self, m: Member) -> bool:
        """A re-queued candidate may have been committed just before a kill, before its static / LLM checks
        ran: run the missing ones now, and send it to the evaluator when it may go (True: sent, or its review
        is under way and will send it)."""
        st = self.ws.status(m.id)
        pre = [s for s in ("static", "llm_verify") if s in st.stages]
        if any(st.stages[s].status in BLOCKING for s in pre):
            bad = next(st.stages[s] for s in pre if st.stages[s].status in BLOCKING)
            self.ws.record(m.id, [Event(EVALUATED, {"rejected": True, "stage": bad.stage, "reason": bad.reason},
                                        now_iso())])
            m.state, m.rejected, m.failed_stage, m.reason = DONE, True, bad.stage, bad.reason
            return False
        missing = (self.checks and "static" not in st.stages) or (
            self.verifier is not None and m.operator != BASELINE and "llm_verify" not in st.stages)
        if missing and "compile" not in st.stages:
            self._files.setdefault(m.id, self.ws.files(m.id))
            res = self._pre_gpu(m)
            if res is None:
                self._submit(m)
            return res is None or res is REVIEWING
        self._submit(m)
        return True

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
            if self._can_fill(gen):
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

    def _waiting_stop(self, gen: int, produced: bool) -> ev.Stopped | None:
        """After generation `gen`: stop where nothing is measured and nothing more may be queued (engine.gpu_wait:
        one generation ahead of the measurements), saying what waits for a GPU and how to go on."""
        from engine.gpu_wait import HOW_TO_GO_ON, WAITING_FOR_GPU

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

    def _wait(self) -> None:
        self._flags.wake.clear()
        self._drain(block=True)

    # ----------------------------------------------------------------------------------- budgets

    def spent_usd(self) -> float:
        """LLM dollars spent by this session: before this run (from the workspace) plus this run's ledger."""
        spent = getattr(self.ledger, "spent_usd", 0.0) if self.ledger is not None else 0.0
        return self.spent_before + float(spent or 0.0)

    def _budget_left(self) -> tuple[str, str] | None:
        limit = self.budgets.usd
        if limit is None and self.ledger is not None:
            limit = getattr(self.ledger, "budget_usd", None)
        if limit is not None and not math.isinf(limit):
            spent = self.spent_usd()
            if spent >= limit:
                return "usd", f"${spent:.2f} of ${limit:.2f}"
        if self.budgets.wall_s is not None:
            elapsed = self.clock() - self._t0
            if elapsed >= self.budgets.wall_s:
                return "wall_time", f"{elapsed:.0f}s of {self.budgets.wall_s:.0f}s"
        return None

    # ----------------------------------------------------------------------------------- filling

    def _target(self, gen: int) -> int:
        if gen == 0 and self._seeds_with_baseline():
            return 1
        return self.budgets.population

    def _can_fill(self, gen: int) -> bool:
        if gen in self._closed_gens:
            return False
        filled = len(self.population.in_generation(gen)) + sum(1 for g, _, _ in self._proposing.values() if g == gen)
        if filled >= self._target(gen):
            return False
        if self._attempts.get(gen, 0) >= self.budgets.attempts_per_slot * self._target(gen):
            self._closed_gens.add(gen)
            return False
        if len(self._proposing) >= max(1, self.budgets.proposals_in_flight):
            return False
        cap = getattr(self.evaluator, "capacity", None)
        return not cap or len(self._in_flight) < cap

    def _seeds_with_baseline(self) -> bool:
        """Generation 0 is the task's baseline alone (not when --no-baseline: a population of one is then a
        proposal, whatever its size)."""
        return self.use_baseline and self.task.baseline_dir(self.direction) is not None

    def _fill_one(self, gen: int) -> ev.Stopped | None:
        """Fill one slot of generation `gen`: the baseline, or one proposal. Returns Stopped to end the run."""
        if gen == 0 and self._seeds_with_baseline() and not self.population.in_generation(0):
            self._commit_baseline()
            return None
        el = self.population.eligible(before=gen)
        pool = None
        if not el and gen > 0:
            # nothing measured (no GPU here): propose from parents waiting for a GPU, one generation ahead
            pool = self.population.queueable(before=gen) or None
            el = pool or []
        supported = frozenset(getattr(self.proposer, "operators", ()) or ()) or None
        op = self.policy.choose(self.rng, eligible=len(el) if gen > 0 else 0,
                                failures=len(self.population.failures(before=gen)) if gen > 0 else 0,
                                meta_done=self._meta_done.get(gen, 0) + sum(  # metas in flight count too
                                    1 for g, o, _ in self._proposing.values() if g == gen and o == "meta"),
                                supported=supported)
        if gen == 0 and op is None:
            self._emit(ev.Log(self.session, message=f"the {getattr(self.proposer, 'name', '?')} proposer cannot "
                              "start without a baseline (nothing to translate from)", level="error"))
            self._closed_gens.add(gen)
            return None
        if op is None:
            if not el:
                self._emit(ev.Log(self.session, level="warning", message=(
                    f"generation {gen}: no operator of the {getattr(self.proposer, 'name', '?')} proposer can run: "
                    "no eligible candidate to start from")))
            self._closed_gens.add(gen)
            return None
        request, parents = self._request(op, gen, pool)
        if request is None:
            self._attempts[gen] = self._attempts.get(gen, 0) + 1
            if op in ("mutate", "tune"):
                self._closed_gens.add(gen)   # every eligible parent is spent
            return None
        self._attempts[gen] = self._attempts.get(gen, 0) + 1
        if self._pool is None:
            return self._after_proposal(gen, op, parents, guarded(self.proposer, request))
        token = next(self._tokens)
        self._proposing[token] = (gen, op, parents)
        fut = self._pool.submit(guarded, self.proposer, request)
        fut.add_done_callback(lambda f: (self._inbox.put(("proposal", str(token), f)), self._flags.wake.set()))
        return None

    def _after_proposal(self, gen: int, op: str, parents: list[Member], proposal: Proposal) -> ev.Stopped | None:
        """What a proposal leads to: a commit, directives, a recorded failure, a stop or a pause."""
        self._emit(ev.CandidateProposed(self.session, operator=op, status=proposal.status.value,
                                        parents=tuple(m.id for m in parents), reason=proposal.reason,
                                        cost_usd=proposal.cost_usd))
        if proposal.status == ProposalStatus.UNAVAILABLE:
            self._attempts[gen] = max(0, self._attempts.get(gen, 0) - 1)   # not an attempt at the search
            self._outage(proposal.reason)
            return None
        if proposal.status == ProposalStatus.STOP:
            self._record_failed(proposal, gen)
            if not self._flags.stop.is_set():
                self._stop_reason = f"the proposer stopped: {proposal.reason}"
                self._flags.stop.set()
            return None
        if proposal.status == ProposalStatus.EMPTY:
            for m in parents:
                self._empty_parents.setdefault(gen, set()).add(m.id)
            if not parents:
                self._closed_gens.add(gen)
            return None
        if proposal.status != ProposalStatus.OK:
            self._record_failed(proposal, gen)
            return None
        if op == "meta" or (proposal.candidate is None and proposal.directives):
            self._meta_done[gen] = self._meta_done.get(gen, 0) + 1
            self._set_directives(proposal)
            return None
        if proposal.candidate is None:
            return None
        cand = proposal.candidate
        if cand.source_hash in self.population.known_hashes:
            self._emit(ev.Log(self.session, message=f"proposal {proposal.id} repeats a known candidate; skipped"))
            self._record_failed(proposal, gen, reason="the answer repeats a candidate this session already has")
            return None
        self._commit(proposal, gen, parents)
        return None

    def _record_failed(self, proposal: Proposal, gen: int, reason: str | None = None) -> None:
        """A proposal that produced no candidate: its tokens and dollars go to the session's note, so a resumed
        session counts what it cost (nothing is written for one that cost nothing and used no model)."""
        if not (proposal.cost_usd or proposal.usage.total_tokens or proposal.model):
            return
        data = {"proposal": proposal.id, "operator": proposal.operator, "proposer": proposal.proposer,
                "generation": gen, "parents": list(proposal.parents), "reason": (reason or proposal.reason)[:500],
                "error": proposal.data.get("error"), "model": proposal.model, "usage": proposal.usage.to_json(),
                "cost_usd": proposal.cost_usd}
        try:
            self.ws.record_session_event(self.session, PROPOSAL_FAILED, data)
        except Exception as exc:  # noqa: BLE001 - a note that cannot be written must not end the session
            self._emit(ev.Log(self.session, level="warning", message=f"could not record a failed proposal: {exc}"))

    def _outage(self, reason: str) -> None:
        """The LLM API stayed unavailable for the whole outage window: pause the session. Nothing was decided,
        nothing counts against the search; the same command (or resume in the app) carries on."""
        first = not (self._stop_paused or self._flags.paused)
        if first:
            try:
                self.ws.record_session_event(self.session, API_UNAVAILABLE, {"reason": reason[:500]})
            except Exception:  # noqa: BLE001
                pass
            self._emit(ev.Log(self.session, level="error", message=reason))
        if self.on_unavailable == "pause":
            if first:
                self.pause(reason)
            return
        if not self._flags.stop.is_set():
            self._stop_paused = True
            self._stop_reason = (f"{reason}; paused: nothing was counted against the search, run the same command "
                                 "to resume")
            self._flags.stop.set()

    def _release_held(self) -> None:
        """After a pause for an outage: review (and evaluate) the candidates that were waiting for the API."""
        held, self._held = list(self._held), set()
        for cid in held:
            m = self.population.get(cid)
            if m is not None and m.state == PENDING:
                self._checked_before_gpu(m)

    def _request(self, op: str, gen: int, pool: list[Member] | None = None
                 ) -> tuple[ProposalRequest | None, list[Member]]:
        """`pool`: the parents to choose from where none is measured (members waiting for a GPU)."""
        skip = self._empty_parents.get(gen, set())
        parents: list[Member] = []
        feedback = ""
        if op in ("mutate", "tune"):
            parents = self.population.select(self.rng, 1, exclude=skip, before=gen, pool=pool)
            if op == "mutate" and parents:
                feedback = self._profile_feedback(parents[0])
        elif op == "crossover":
            parents = self.population.select(self.rng, 2, exclude=skip, before=gen, pool=pool)
            if len(parents) < 2:
                return None, []
        elif op == "repair":
            m = self.population.select_failure(self.rng, exclude=skip, before=gen)
            parents = [m] if m else []
            if m is not None:
                feedback = self._feedback(m)
        if op in ("mutate", "tune", "repair") and not parents:
            return None, []
        exclude = {m.id for m in parents}
        elite = None
        if op == "mutate":   # EvoEngineer: the best other candidate's code beside the parent
            elite = next((m for m in self.population.ranked() if m.id not in exclude and m.fitness is not None
                          and m.generation < gen), None)
        req = ProposalRequest(
            task=self.task, operator=op, direction=self.direction,
            parents=tuple(self._candidate(m.id) for m in parents),
            parent_summaries=tuple(self._summary(m) for m in parents), feedback=feedback,
            insights=insights(self.population, exclude, before=gen) if op in ("mutate", "crossover") else (),
            elite=self._candidate(elite.id) if elite is not None else None,
            elite_summary=self._summary(elite) if elite is not None else "",
            lessons=self._lessons(gen, exclude) if op != "tune" else (),
            directives=self.directives, population=self.population.summary() if op == "meta" else "",
            hints=self.hints, known_hashes=self.population.known_hashes, generation=gen)
        return req, parents

    def _summary(self, m: Member) -> str:
        """A parent's verdict, speedup and rationale, and its per-config times against eager and torch.compile."""
        from engine.llm.render import render_timings
        text = parent_summary(m)
        try:
            timings = render_timings(self.ws.status(m.id).measurement)
        except Exception:  # noqa: BLE001 - a note that cannot be read leaves the summary short, nothing more
            timings = ""
        return f"{text}\n\n{timings}" if timings else text

    def _lessons(self, gen: int, exclude: set[str], limit: int = 6) -> tuple[str, ...]:
        """What failed in this session, newest first: compile errors, wrong results, rejected hacks."""
        out = []
        for m in sorted(self.population.failures(before=gen), key=lambda m: (m.generation, m.id), reverse=True):
            if m.id in exclude:
                continue
            where = ("rejected before the GPU by the " + ("static checks" if m.failed_stage == "static"
                                                           else "LLM reviewers")) if m.rejected else \
                f"failed at {m.failed_stage}"
            reason = " ".join((m.reason or "").split())[:300]
            out.append(f"{m.id} ({m.operator}: {(m.title or m.rationale)[:80]}): {where}: {reason}")
            if len(out) >= limit:
                break
        return tuple(out)

    def _profile_feedback(self, m: Member) -> str:
        """The parent's `profile` verdict summary (engine/profile), for the mutate prompt's feedback."""
        from engine.profile.runner import profile_feedback
        try:
            return profile_feedback(self.ws.status(m.id).stages)
        except Exception:  # noqa: BLE001 - no profile is no feedback, never a failed proposal
            return ""

    def _feedback(self, m: Member) -> str:
        try:
            st = self.ws.status(m.id)
        except Exception:  # noqa: BLE001
            return m.reason
        stage = st.stages.get(m.failed_stage or "")
        if stage is None or stage.verdict is None:
            return m.reason
        v = stage.verdict.verdict
        log = str(v.data.get("log") or "")
        return f"{v.stage} failed: {v.reason}" + (f"\n\n{log[-4000:]}" if log else "")

    def _candidate(self, cid: str) -> Candidate:
        if cid not in self._files:
            self._files[cid] = self.ws.files(cid)
        return self._files[cid]

    def _set_directives(self, proposal: Proposal) -> None:
        self.directives = proposal.directives or ""
        anchor = self.population.best()
        if anchor is not None:
            self.ws.record_event(anchor.id, DIRECTIVES, {"directives": self.directives, "cost_usd": proposal.cost_usd,
                                                          "rationale": proposal.rationale, "proposal": proposal.id})
        self._emit(ev.DirectivesUpdated(self.session, directives=self.directives, cost_usd=proposal.cost_usd))

    # ------------------------------------------------------------------------------------ commits

    def _commit_baseline(self) -> None:
        path = self.task.baseline_dir(self.direction)
        assert path is not None
        cand = load_candidate(path, name=f"{self.task.name}-{self.direction}-baseline")
        if cand.source_hash in self.population.known_hashes:
            return
        rec = self.ws.commit_candidate(self.session, cand, parents=(), operator=BASELINE, proposer=BASELINE,
                                       generation=0, title="the task's baseline",
                                       rationale=f"The native baseline shipped with the task ({path}).",
                                       prompt="(the task's baseline: not proposed)\n",
                                       search_state=search_state(self, 0, ()))
        self._after_commit(rec, cand, (), 0)

    def _commit(self, proposal: Proposal, gen: int, parents: list[Member]) -> None:
        cand = proposal.candidate
        assert cand is not None
        ids = [p.id for p in parents] or [p for p in proposal.parents if p in self.population.members]
        title = str(proposal.data.get("title") or cand.name)
        rec = self.ws.commit_candidate(self.session, cand, parents=ids, operator=proposal.operator,
                                       proposer=proposal.proposer, model=proposal.model, generation=gen,
                                       title=title, rationale=proposal.rationale, prompt=proposal.prompt_md(),
                                       search_state=search_state(self, gen, ids))
        self._after_commit(rec, cand, tuple(ids), gen, cost=proposal.cost_usd)

    def _after_commit(self, rec: Any, cand: Candidate, parents: tuple[str, ...], gen: int, cost: float = 0.0) -> None:
        m = self.population.add(Member(id=rec.id, generation=gen, operator=rec.operator,
                                       source_hash=cand.source_hash, parents=parents, title=title_of(rec.subject),
                                       rationale=rec.rationale, cost_usd=cost))
        self._files[rec.id] = self.ws.files(rec.id)
        self._emit(ev.CandidateCommitted(self.session, candidate=rec.id, generation=gen, operator=rec.operator,
                                         parents=parents, title=m.title))
        if self._flags.stop.is_set():
            return    # arrived while stopping: committed; a resume checks and evaluates it
        if self._pre_gpu(m) is None:
            self._submit(m)

    def _pre_gpu(self, m: Member) -> Verdict | None:
        """Static checks and LLM verifiers; a blocking verdict finishes the candidate here (no GPU). Returns
        that verdict, None when the candidate may go on, or REVIEWING when its LLM review runs on the pool
        (the review's answer sends it on) or waits for the API."""
        llm = self.verifier is not None and m.operator != BASELINE   # the shipped baseline is not LLM-reviewed
        if not self.checks and not llm:
            return None
        cand = self._files[m.id]
        verdicts: list[Verdict] = []
        for check in self.checks:
            try:
                verdicts.append(check(self.task, self.direction, cand))
            except Exception as exc:  # noqa: BLE001 - a broken check is reported, not fatal
                verdicts.append(Verdict("static", Status.SKIPPED, f"check failed to run: {exc!r}"))
        if llm and self.verifier is not None and not any(v.status in BLOCKING for v in verdicts):
            if self._pool is not None:
                cid, verifier = m.id, self.verifier
                self._verifying.add(cid)
                fut = self._pool.submit(verifier, cand)
                fut.add_done_callback(lambda f: (self._inbox.put(("verified", cid, (verdicts, f))),
                                                 self._flags.wake.set()))
                return REVIEWING
            return self._reviewed(m, verdicts, self.verifier(cand))
        return self._reviewed(m, verdicts, None)

    def _reviewed(self, m: Member, verdicts: list[Verdict], ver: Any) -> Verdict | None:
        """Record the static verdicts and the LLM review's votes; finish the candidate if one blocks it."""
        if ver is not None and getattr(ver, "unavailable", None):
            self._held.add(m.id)          # nothing decided, nothing written: reviewed again after the pause
            self._outage(ver.unavailable)
            return REVIEWING
        stop_reason = None
        if ver is not None:
            verdicts = verdicts + list(getattr(ver, "votes", ())) + [ver.verdict]
            stop_reason = getattr(ver, "stop", None)
        blocking = next((v for v in verdicts if v.status in BLOCKING and v is self._effective(verdicts, v.stage)),
                        None)
        entries: list[Any] = [VerdictNote(v, now_iso()) for v in verdicts]
        if blocking is not None:
            entries.append(Event(EVALUATED, {"rejected": True, "stage": blocking.stage, "reason": blocking.reason},
                                 now_iso()))
        if entries:
            self.ws.record(m.id, entries)
        for v in verdicts:
            if v is self._effective(verdicts, v.stage):
                self._emit(ev.StageFinished(self.session, candidate=m.id, stage=v.stage, status=v.status.value,
                                            reason=v.reason))
        if stop_reason:
            self._stop_reason = f"the verifiers cannot go on: {stop_reason}"
            self._flags.stop.set()
            self._emit(ev.Log(self.session, message=f"verifiers asked to stop: {stop_reason}", level="error"))
        if blocking is not None:
            m.state, m.rejected, m.failed_stage, m.reason = DONE, True, blocking.stage, blocking.reason
            self._evaluated += 1
            self._emit(ev.CandidateEvaluated(self.session, candidate=m.id, generation=m.generation, speedup=None,
                                             eligible=False, failed_stage=blocking.stage, reason=blocking.reason,
                                             rejected=True))
        return blocking

    @staticmethod
    def _effective(verdicts: list[Verdict], stage: str) -> Verdict:
        return [v for v in verdicts if v.stage == stage][-1]

    # -------------------------------------------------------------------------------- evaluations

    def _submit(self, m: Member) -> None:
        cand = self._candidate(m.id)
        cid = m.id

        def on_stage(v: Verdict) -> None:
            self._inbox.put(("stage", cid, v))
            self._flags.wake.set()

        fut = self.evaluator.submit(cand, on_stage)
        self._in_flight[cid] = fut
        fut.add_done_callback(lambda f: (self._inbox.put(("done", cid, f)), self._flags.wake.set()))

    def _drain(self, block: bool) -> None:
        """Handle everything the evaluator sent back. With `block`, wait a little for something (or a control)."""
        if block:
            try:
                item = self._inbox.get(timeout=self.poll_s)
            except queue.Empty:
                return
            self._handle(item)
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            self._handle(item)

    def _handle(self, item: tuple[str, str, Any]) -> None:
        kind, cid, payload = item
        if kind == "proposal":
            gen, op, parents = self._proposing.pop(int(cid))
            if payload.cancelled() or self._flags.abandon.is_set():
                return
            self._after_proposal(gen, op, parents, payload.result())   # guarded(): never raises
            return
        if kind == "verified":
            self._verifying.discard(cid)
            static, fut = payload
            m = self.population.get(cid)
            if m is None or m.state == DONE or fut.cancelled() or self._flags.abandon.is_set():
                return
            try:
                ver = fut.result()
            except Exception as exc:  # noqa: BLE001 - a verifier bug: the candidate goes on unreviewed
                from engine.llm.verifiers import STAGE, Verification
                ver = Verification(Verdict(STAGE, Status.SKIPPED, f"the LLM review failed: {exc!r}"), ())
            if self._reviewed(m, static, ver) is None and not self._flags.stop.is_set():
                self._submit(m)
            return
        if kind == "profiled":
            self._profiling.pop(cid, None)
            if payload.cancelled() or self._flags.abandon.is_set():
                return
            try:
                verdict: Verdict = payload.result()
            except Exception as exc:  # noqa: BLE001 - an evaluator bug: profiling is feedback, never a failure
                verdict = Verdict(PROFILE_STAGE, Status.SKIPPED, f"profiling failed: {exc!r}")
            self._record_profile(cid, verdict)
            return
        m = self.population.get(cid)
        if kind == "notice":
            self._notice(cid)
            return
        if m is None or m.state == DONE:
            return
        if kind == "stage":
            v: Verdict = payload
            self._emit(ev.StageFinished(self.session, candidate=cid, stage=v.stage, status=v.status.value,
                                        reason=v.reason))
            if v.stage == "compile":
                # compile finishes long before the GPU stages: note it now
                self.ws.record(cid, [VerdictNote(v, now_iso())])
                self._recorded.setdefault(cid, set()).add(v.stage)
            return
        fut = payload
        self._in_flight.pop(cid, None)
        if fut.cancelled():
            return  # stays pending in the workspace; a resume re-queues it
        try:
            out: EvalOutcome = fut.result()
        except Exception as exc:  # noqa: BLE001 - an evaluator bug is this candidate's failure
            out = EvalOutcome([Verdict("correctness", Status.FAIL, f"evaluator error: {exc!r}")])
        self._record_outcome(m, out)

    def _notice(self, cid: str) -> None:
        from engine.errors import KbenchError

        if cid in self._in_flight:
            return          # its evaluation is running here: the result will be re-read when recorded
        try:
            view = self.ws.view(cid)
        except KbenchError as exc:
            self._emit(ev.Log(self.session, message=f"{cid}: cannot re-read it: {exc}", level="warning"))
            return
        if view.record.session != self.session:
            return
        fresh, finished = member_from_view(view)
        m = self.population.get(fresh.id)
        if m is None:
            m = self.population.add(fresh)
            for p in m.parents:
                if p in self.population.members:
                    self.population.members[p].times_parent += 1
            self._emit(ev.CandidateCommitted(self.session, candidate=m.id, generation=m.generation,
                                             operator=m.operator, parents=m.parents, title=m.title))
            if finished:
                return
            self._emit(ev.Log(self.session, message=f"{m.id}: joined the session ({view.record.proposer}), "
                                                    "sent to the evaluator"))
            self._submit(m)
            return
        if finished:
            if fresh.rejected:
                self._emit(ev.Log(self.session, level="warning", message=(
                    f"{m.id} is still blocked at {fresh.failed_stage}: not re-queued")))
            changed = (m.eligible, m.speedup) != (fresh.eligible, fresh.speedup)
            m.state, m.speedup, m.eligible = DONE, fresh.speedup, fresh.eligible
            m.failed_stage, m.reason, m.rejected = fresh.failed_stage, fresh.reason, fresh.rejected
            if changed:
                what = f"{m.speedup:.3f}x" if m.eligible and m.speedup else f"not eligible ({m.failed_stage})"
                self._emit(ev.Log(self.session, message=f"{m.id}: re-read from the workspace: now {what}"))
            return
        if m.state == DONE:
            self._evaluated -= 1
            m.state, m.rejected, m.failed_stage, m.reason = PENDING, False, None, ""
            self._emit(ev.Log(self.session, message=f"{m.id}: override seen, sent to the evaluator"))
            self._submit(m)
        elif not m.rejected and m.state == PENDING:     # (one in flight returned above)
            self._submit(m)

    def _record_outcome(self, m: Member, out: EvalOutcome) -> None:
        if out.no_gpu:
            self._record_waiting(m, out)
            return
        if out.infra_error:
            self._record_infra_failure(m, out)
            return
        self._infra_streak = 0
        before = self.population.best()
        entries = self._unrecorded_verdicts(m, out)
        meas = out.measurement()
        if meas is not None:
            entries.append(meas)
        entries.append(Event(EVALUATED, {"speedup": out.speedup_eager, "failed_stage": out.failed_stage,
                                         "seconds": round(out.seconds, 3), "build_s": out.build_s,
                                         "gpu_s": out.gpu_s, "gpu": out.gpu}, now_iso()))
        status = self.ws.record(m.id, entries)
        m.state = DONE
        m.speedup = status.speedup
        m.eligible = status.eligible
        blocking = next((s for s in status.stages.values() if s.status in BLOCKING), None)
        m.failed_stage = blocking.stage if blocking else (None if status.speedup is not None else "timing")
        m.reason = blocking.reason if blocking else ("" if status.speedup is not None else
                                                     next((v.reason for v in out.verdicts if v.stage == "timing"),
                                                          "not timed"))
        self._evaluated += 1
        self._emit(ev.CandidateEvaluated(self.session, candidate=m.id, generation=m.generation, speedup=m.speedup,
                                         eligible=m.eligible, failed_stage=m.failed_stage, reason=m.reason))
        after = self.population.best()
        new_best = after is not None and after.id == m.id and (before is None or before.id != m.id)
        if after is not None and (before is None or after.id != before.id):
            self._emit(ev.BestImproved(self.session, candidate=after.id, speedup=after.speedup or 0.0,
                                       previous=before.id if before else None,
                                       previous_speedup=before.speedup if before else None))
        self._profile_if_due(m, out, new_best)

    def _profile_if_due(self, m: Member, out: EvalOutcome, new_best: bool) -> None:
        """Ask the evaluator for the candidate's profile stage, where the mode calls for it and its evaluation
        did not run it: "best" for a new best, "all" for any that passed. The verdict comes back through the
        inbox (`_record_profile`)."""
        if self.profile == "off" or (self.profile == "best" and not new_best) or not needs_profile(out):
            return
        fn = getattr(self.evaluator, "profile", None)
        if fn is None or m.id in self._profiling or self._flags.abandon.is_set():
            return
        try:
            fut = fn(self._candidate(m.id), device=dict(out.device or {}))
        except Exception as exc:  # noqa: BLE001 - no profile is no feedback, never a failed session
            self._emit(ev.Log(self.session, level="warning", message=f"{m.id}: could not profile it: {exc}"))
            return
        self._profiling[m.id] = fut
        why = "new best" if new_best else "passed"
        self._emit(ev.Log(self.session, message=f"{m.id}: {why}, profiling it (ncu + torch profiler)"))
        fut.add_done_callback(lambda f, cid=m.id: (self._inbox.put(("profiled", cid, f)), self._flags.wake.set()))

    def _record_profile(self, cid: str, verdict: Verdict) -> None:
        """The profile verdict goes to the candidate's note like every verdict (`kbench report`, the app and the
        mutate prompt's feedback read it there)."""
        self.ws.record(cid, [VerdictNote(verdict, now_iso())])
        self._emit(ev.CandidateProfiled(self.session, candidate=cid, status=verdict.status.value,
                                        reason=verdict.reason))

    def _unrecorded_verdicts(self, m: Member, out: EvalOutcome) -> list[Any]:
        """Notes for the outcome's verdicts that were not already written as their stages finished."""
        done = self._recorded.pop(m.id, set())
        return [VerdictNote(v, now_iso()) for v in out.verdicts if v.stage not in done]

    def _record_waiting(self, m: Member, out: EvalOutcome) -> None:
        """Compiled where no GPU is visible: the stages that ran are kept, a `waiting_for_gpu` event says why the
        rest did not, and no `evaluated` event is written, so the same command on a GPU machine measures it.
        Not a failure and not the executor breaking: it does not count toward `infra_failures_in_a_row`."""
        entries = self._unrecorded_verdicts(m, out)
        entries.append(out.infra_event(executor=type(self.evaluator).__name__))
        self.ws.record(m.id, entries)
        m.state, m.eligible, m.speedup, m.waiting = DONE, False, None, True
        m.failed_stage, m.reason = None, out.infra_error
        self._emit(ev.CandidateEvaluated(self.session, candidate=m.id, generation=m.generation, speedup=None,
                                         eligible=False, reason=out.infra_error, waiting_for_gpu=True))

    def _record_infra_failure(self, m: Member, out: EvalOutcome) -> None:
        """The executor lost the evaluation on every attempt (worker or node died): nothing is judged. The
        stages that did finish are kept, an `infrastructure_failure` event says what happened, and no
        `evaluated` event is written, so a resumed session evaluates the candidate again."""
        entries = self._unrecorded_verdicts(m, out)
        entries.append(out.infra_event(executor=type(self.evaluator).__name__))
        self.ws.record(m.id, entries)
        m.state, m.eligible, m.speedup = DONE, False, None
        m.failed_stage, m.reason = "infrastructure", out.infra_error
        self._evaluated += 1
        self._infra_streak += 1
        self._emit(ev.CandidateEvaluated(self.session, candidate=m.id, generation=m.generation, speedup=None,
                                         eligible=False, failed_stage="infrastructure", reason=out.infra_error,
                                         infrastructure=True))
        limit = self.budgets.infra_failures_in_a_row
        if limit and self._infra_streak >= limit and not self._flags.stop.is_set():
            self._stop_reason = (f"the executor lost {self._infra_streak} evaluations in a row (last: "
                                 f"{out.infra_error}); fix it and run the same command to resume")
            self._emit(ev.Log(self.session, message=self._stop_reason, level="error"))
            self._flags.stop.set()

    # ------------------------------------------------------------------------------------- events

    def _emit(self, event: ev.EvolveEvent) -> None:
        for cb in list(self._subs):
            try:
                cb(event)
            except Exception:  # noqa: BLE001 - the loop never dies for a subscriber
                pass
