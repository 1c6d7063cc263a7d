"""A config's timing verdict, taken once the candidate's runner is stopped: the candidate's timing job judged
against the null loop, and the eager and torch.compile baselines, timed here by the judge alone or reused
when a quick re-timing agrees: from the session (engine/pipeline/baselines.py keeps them between requests), else
from the disk cache an earlier evaluation on this very GPU left (engine/pipeline/baseline_cache.py; the request
carries every GPU's entries and the judge takes only those filed under its own DeviceInfo.key()).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

from engine.pipeline.judge import analysis
from engine.pipeline.judge.configs import Prepared, composer, seeded
from engine.pipeline.judge.digest import Hasher, host_hash
from engine.pipeline.protocol.result import CACHED, MEASURED, REUSED, BaselineOrigin, NullLoop, Recheck, TimingRow

if TYPE_CHECKING:
    from engine.config.sections import TimingParams
    from engine.harness.runtimes.base import TaskRuntime
    from engine.pipeline.judge.fresh import Fresh
    from engine.pipeline.judge.timer import LocalTimer
    from engine.pipeline.protocol.result import JudgeResult
    from engine.pipeline.protocol.types import JudgeRequest, SessionBaseline

BASELINE_DRIFT = 0.10    # a session's or the cache's baseline is re-measured when a quick re-timing moved more
RECHECK_ITERS = 20       # the quick re-timing's iterations


class TimingJudge:
    """The timing half of one request's verdicts, timed with the judge's own helper (`local`); what it notes
    besides the rows (integrity of the timed outputs, baselines that drifted) goes into `result`."""

    def __init__(self, req: JudgeRequest, local: LocalTimer, result: JudgeResult):
        self.req, self.local, self.result = req, local, result

    def verdict(self, runtime: TaskRuntime, prep: Prepared, tol: analysis.Tolerance,
                job: analysis.Job, hasher: Hasher = host_hash, fresh: Fresh | None = None,
                mutated: tuple[int, ...] = ()) -> TimingRow:
        """The verdict on a timing job of the candidate's (its runner already stopped; its checked iterations
        digested, else digested here against `prep`'s references), with the null loop and the baselines timed now
        by the judge alone, or the session's baselines where a re-timing agrees (`mutated`: the arguments the
        reference changes in place, configs.Prepared.mutated of the config the candidate was timed on)."""
        import torch  # lazy: the judge loads torch only after its runner is spawned (judge.py)
        p = self.req.timing_params
        known = self._session_baselines(runtime, prep)
        # The protocol's own cost on this GPU, with the candidate's argument sizes: a loop calling nothing.
        # Never taken from the session: it is cheap, and it anchors the checks of this candidate's clock.
        live = [t.clone() for t in prep.tensors[: len(prep.tensors) // max(len(prep.variants), 1)]]
        variants = [prep.tensors[i * len(live):(i + 1) * len(live)] for i in range(len(prep.variants))]
        modes = (fresh.modes, fresh.alphas) if fresh is not None and fresh.active and live else ((), ())
        null = self.local.time(lambda: None, live, variants if live else [], self._quick() if known else p,
                               fresh=modes)
        null_ms = analysis.summarise([c.ms_all for c in null.timed()], [c.ms_all for c in null.timed()],
                                     0.0).median_ms
        null_gap = analysis.median_gap_ms(null.timed())
        res = analysis.judge_timing(job, [v.ref for v in prep.variants], composer(runtime, prep), tol,
                                    null_ms, null_gap, hasher, p.checks, mutated)
        if self.req.integrity:
            self.result.integrity[f"{prep.name}@timing"] = res.integrity
        if res.stats is None:
            return TimingRow(error=res.error or "no timed iterations")
        row = TimingRow(candidate=res.stats, hidden_work=res.hidden_work, witness=res.witness,
                        checked=[int(i) for i in job.end.get("checked", [])], null=NullLoop(null_ms, null_gap))
        if known is not None:
            session, recheck, source = known
            row.baselines = BaselineOrigin(source, recheck, session.measured_at if source == CACHED else None)
            row.eager, row.compile, row.compile_error = session.eager, session.compile, session.compile_error
        else:
            row.baselines = BaselineOrigin(MEASURED)
            runtime.restore_state(prep.variants[0].state)
            if "eager" in self.req.baselines:
                eager = self.local.time(_seeded(runtime.eager_callable(), prep), [], [], p)
                row.eager = analysis.summarise([c.ms for c in eager.timed()], [c.ms_all for c in eager.timed()],
                                               null_ms)
            if "compile" in self.req.baselines:
                try:
                    fn = runtime.compiled_callable()
                    if fn is not None:
                        comp = self.local.time(_seeded(fn, prep), [], [], p)
                        row.compile = analysis.summarise([c.ms for c in comp.timed()],
                                                         [c.ms_all for c in comp.timed()], null_ms)
                except Exception as exc:  # noqa: BLE001 - a baseline that cannot compile is absent, with the reason
                    row.compile_error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
            torch.cuda.synchronize()
        if row.eager is not None:
            row.speedup_eager = row.eager.median_ms / res.stats.median_ms
        if row.compile is not None:
            row.speedup_compile = row.compile.median_ms / res.stats.median_ms
        return row

    def _session_baselines(self, runtime: TaskRuntime, prep: Prepared) -> tuple[SessionBaseline, Recheck, str] | None:
        """This config's baselines as measured earlier in the session or kept in the disk cache for this GPU (the
        request carries them), with where they came from, if a quick re-timing of one of them still agrees: then
        they are reused as they are, else all are measured anew."""
        known, source = self._known(prep.name)
        wanted = [b for b in ("eager", "compile") if b in self.req.baselines]
        # eager is re-timed (torch.compile would be compiled again to re-time it: the cost this saves); both
        # are the task's reference on the same GPU, so eager agreeing says the GPU's state has not moved
        if known is None or known.eager is None or "eager" not in wanted or \
                ("compile" in wanted and known.compile is None and known.compile_error is None):
            return None
        try:
            runtime.restore_state(prep.variants[0].state)
            fn = _seeded(runtime.eager_callable(), prep)
            job = self.local.time(fn, [], [], self._quick())
            now = analysis.summarise([c.ms for c in job.timed()], [c.ms_all for c in job.timed()], 0.0).median_ms
        except Exception:  # noqa: BLE001 - measure everything anew rather than fail the candidate
            return None
        then = known.eager.median_ms
        recheck = Recheck("eager", round(now, 5), round(then, 5))
        if then <= 0 or abs(now / then - 1.0) > BASELINE_DRIFT:
            self.result.baseline_drift[prep.name] = recheck
            return None
        return known, recheck, source

    def _known(self, name: str) -> tuple[SessionBaseline | None, str]:
        """A config's earlier baselines: the session's, else the disk cache's for this judge's own GPU (an entry of
        another GPU, driver, torch or CUDA is never used); with REUSED or CACHED (None, MEASURED: none)."""
        if (known := (self.req.session_baselines or {}).get(name)) is not None:
            return known, REUSED
        device = self.result.device
        if device is not None and device.gpu and self.req.cached_baselines:
            if (known := self.req.cached_baselines.get(device.key(), {}).get(name)) is not None:
                return known, CACHED
        return None, MEASURED

    def _quick(self) -> TimingParams:
        return dataclasses.replace(self.req.timing_params, warmup=3, min_iters=RECHECK_ITERS,
                                   max_iters=RECHECK_ITERS, budget_s=0.0)


def _seeded(call: Callable[[], Any], prep: Prepared) -> Callable[[], Any]:
    """A baseline seeded before every call as the candidate's calls are, where the reference draws random numbers
    (CallPlan.call_seed): both pay the same seeding, and draw the same numbers."""
    seed = prep.variants[0].plan.call_seed
    if seed is None:
        return call
    return lambda: seeded(seed, call)
