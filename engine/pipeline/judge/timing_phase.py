"""The judge's timing phase (a part of engine/pipeline/judge/evaluation.py's Judge): the candidate timed on every config
that passed its checks, each timing job's checked iterations compared once the job has ended, then, with the
runner stopped, the null loop and the baselines timed by the judge alone (engine/pipeline/judge/timing.py).

Lazy imports: torch, inside the methods, as in evaluation.py (the runner is spawned before torch loads).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from engine.pipeline.judge import analysis
from engine.pipeline.judge.configs import Prepared, composer, prepare_baseline, reference_outputs
from engine.pipeline.judge.runner_link import settle
from engine.pipeline.judge.timing import TimingJudge
from engine.pipeline.protocol import messages as msg
from engine.pipeline.protocol.result import Stop, TimingRow

if TYPE_CHECKING:
    from engine.harness.runtimes.base import TaskRuntime
    from engine.pipeline.judge.fresh import Fresh
    from engine.tasks.model import TaskConfig


class TimingPhase:
    """The Judge's timing phase; the state and the steps it shares with the checks are the Judge's own."""

    def _time(self, configs: list[TaskConfig], to_time: dict[str, Prepared | None], runtime: TaskRuntime,
              tol: analysis.Tolerance) -> None:
        """The timing phase, on the configs that passed the checks."""
        # The candidate first, on every timed config; then its runner is stopped (with anything it left
        # running) before the judge times the null loop and the baselines, so no candidate code shares the
        # GPU with a baseline (and none can slow one down for this or, through the session, later candidates).
        import torch
        jobs: dict[str, analysis.Job] = {}
        call_seeds: dict[str, int | None] = {}   # a reference that draws random numbers: the baselines' seed
        fresh: dict[str, Fresh | None] = {}        # the null loop pays for the same fresh inputs
        mutated: dict[str, tuple[int, ...]] = {}   # the arguments the reference changes in place
        self.timing_since_us = time.time_ns() // 1000
        p = self.req.timing_params
        for cfg in configs:
            if cfg.name not in to_time:
                continue
            self._note_candidate_side()
            self.out.progress("timing", cfg.name)
            prep = to_time[cfg.name]
            if prep is None:   # freed after its check: prepared again, on both sides
                torch.cuda.reset_peak_memory_stats()
                prep, reply = self._prepare(cfg, runtime)
                if prep is None:
                    if isinstance(reply, msg.Error):
                        self._maybe_unmeasured(reply.message or "", cfg.name, "while the runner took the inputs of")
                    self.out.data.timing[cfg.name] = TimingRow(error=f"the candidate could not be set up again: "
                                                                     f"{msg.explain(reply)}")
                    break
            self.runner.expected_outputs = reference_outputs(prep)
            t = time.monotonic()
            job, done = self.runner.run_job(msg.Job(job=0, cid=cfg.name, mode="time", timing=p), self.held_decode,
                                            self.deadline)
            self.spent("timing", t)
            if self._call_left_unmeasured(job, cfg.name, "while the candidate was timed on"):
                raise Stop   # no timing is kept: judge.py closes the runner
            if msg.fatal_reason(done) is None:
                # the checked outputs to this GPU now that the candidate is not being timed, each compared and
                # freed before the next comes over
                self._digest_timed(job, prep, runtime, tol)
            else:
                settle(job)   # after a CUDA error nothing is compared: the outputs are only checked as signed
            if job.forged:
                self.out.data.error = f"the result channel was forged while timing {cfg.name}: {job.forged}"
            elif (fatal := msg.fatal_reason(done)) is not None:
                self.out.data.error = f"CUDA error while timing {cfg.name}: {fatal}"
            if self.out.data.error:
                break
            self._note_memory(cfg.name, done)
            jobs[cfg.name] = job
            call_seeds[cfg.name] = prep.variants[0].plan.call_seed
            fresh[cfg.name] = prep.fresh
            mutated[cfg.name] = prep.mutated
            if to_time[cfg.name] is None:   # prepared again for this job: freed now
                self._release(cfg.name)
                del prep
                torch.cuda.empty_cache()
        self._note_candidate_side()
        self.close()
        t = time.monotonic()
        assert self.local is not None
        timing = TimingJudge(self.req, self.local, self.out.data)
        for cfg in configs:
            if cfg.name not in jobs:
                continue
            self.out.progress("baselines", cfg.name)
            # the first variant set up again on this GPU, without a reference: the baselines' and the null loop's
            prep = prepare_baseline(runtime, cfg, torch.device("cuda"), call_seeds[cfg.name],
                                    self.seeds[0] if self.seeds else None)
            self.out.data.timing[cfg.name] = timing.verdict(runtime, prep, tol, jobs[cfg.name], self.hasher,
                                                            fresh[cfg.name], mutated=mutated[cfg.name])
            self.out.write()
            del prep
        self.spent("baselines", t)

    def _digest_timed(self, job: analysis.Job, prep: Prepared, runtime: TaskRuntime, tol: analysis.Tolerance) -> None:
        """A timing job's checked iterations, each brought to this GPU, checked against its signature, compared and
        freed in turn (the runner waits between jobs); a forged one voids the job (`job.forged`)."""
        digest = self._digester(self._references(runtime, prep), composer(runtime, prep), tol)
        for c in job.timed():
            if job.forged:   # a void stream (a forged record, or an output whose bytes were not those signed)
                return
            if c.checked and c.digest is None and settle(job, c):
                digest(c)
        settle(job)   # any other call's held outputs (none is compared), checked all the same
