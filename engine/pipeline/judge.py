"""The judge: `python -m engine.pipeline.judge REQUEST.json`. Trusted; never runs candidate code.

Or warm: `python -m engine.pipeline.judge --standby TIMER_SO TIMER_MODULE` starts everything that needs no
request (torch, the CUDA context, its jailed runner up to the helper's signed hello), then reads one request
path from stdin and goes on as above (engine/pipeline/warm.py keeps one such spare per GPU).

It builds each config's inputs from seeds with the task's own code, computes the references, starts one
jailed runner for the candidate, sends it the arguments, and decides from the timing helper's signed records
alone: outputs are compared with the judge's references, timed iterations it never announced are checked,
the runner's event times are checked against the judge's own clock, and the baselines (eager, torch.compile)
are timed here with the same compiled loop. The result file is rewritten after every step, so a judge
killed at its deadline still says which config was running.

Transport (docs/formats.md, "Evaluation"): the judge ships the candidate's exact arguments (the `fn` arguments
the task's Model passes, the backward's arguments, or a KernelBench model's inputs and weights) as bytes over
a socket, and the runner ships outputs back through the helper. CUDA IPC would save a host copy, but it needs
the two processes to trust each other's allocations (and the same uid for some handle types), and it would let
the runner write into the judge's memory; bytes it cannot reach back through are simpler to reason about.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from engine.jail.privileges import die_with_parent
from engine.pipeline import analysis, wire
from engine.pipeline.runner_process import RunnerGone, RunnerProcess, make_run_dir, stage_candidate, stage_readonly
from engine.pipeline.types import NO_GPU, CorrectnessResult, IntegrityResult, JudgeRequest, JudgeResult, TimerSpec
from engine.tasks.model import Task

SETTLE_MS = 20.0        # the pause before the async-completeness comparison of a checked call
BASELINE_DRIFT = 0.10    # a session's baseline is re-measured when a quick re-timing moved more than this
RECHECK_ITERS = 20       # the quick re-timing's iterations
STANDBY_START_S = 180.0
STANDBY_STATE = "standby.json"   # written by a standby judge in its folder once warm: {"ok", "why"}  # how long a standby judge's runner may take to come up before any request


class ResultFile:
    def __init__(self, path: Path):
        self.path = path
        self.data = JudgeResult()

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data.to_json(), default=str))
        os.replace(tmp, self.path)

    def progress(self, stage: str, config: str | None = None) -> None:
        self.data.progress = {"stage": stage, "config": config, "t": time.time()}
        self.write()


# ---------------------------------------------------------------------------------------------- helper
class LocalTimer:
    """The judge's own instance of the compiled helper: baselines and the null loop are timed with exactly
    the protocol the candidate is timed with; output fingerprints are checked with its kernel.

    Its records go to an unlinked temporary file, read back after each job: a thread draining a pipe would
    compete for the GIL with the timed calls' Python and slow the baselines down."""

    def __init__(self, so_path: str, module_name: str):
        import tempfile

        from engine.harness.build import load_extension
        self.mod = load_extension(Path(so_path), module_name)
        self.key = os.urandom(32)
        key_r, key_w = os.pipe()
        os.write(key_w, self.key)
        os.close(key_w)
        fd, path = tempfile.mkstemp(prefix="kbench-judge-records-")
        write_fd = os.open(path, os.O_WRONLY | os.O_APPEND)   # its own offset: the reader keeps another
        self.log = open(path, "rb")
        os.unlink(path)
        os.close(fd)
        self.reader = wire.RecordReader(self.log, self.key)
        self.mod.init(key_r, write_fd)
        hello = self.reader.read()
        if hello.type != wire.HELLO:
            raise RuntimeError(f"the timing helper did not start: {hello.name}")
        self._job = 1 << 40

    def fingerprint(self, t: Any, seed: int) -> int:
        return int(self.mod.fingerprint(t, seed)) & (2**64 - 1)

    def time(self, call: Callable[[], Any], live: list[Any], variants: list[list[Any]],
             p: Any, checks: int = 0) -> analysis.Job:
        self._job += 1
        job_id = self._job
        self.mod.run(job_id, "time", call, live, variants, [], p.warmup, p.min_iters, p.max_iters, p.budget_s,
                     checks, p.flush_l2, False, -1.0)
        job = collect(lambda deadline: self.reader.read(), job_id, 0.0, decode=lambda rec, k: None)
        for c in job.calls:  # our own clock, written by the helper as it went
            c.received = c.t_ns / 1e9
        return job


def collect(next_record: Callable[[float], wire.Record], job_id: int, deadline: float,
            decode: Callable[[wire.Record, int], Any]) -> analysis.Job:
    """Read one job's records (JOB_BEGIN .. JOB_END). A forged stream ends the job with `forged` set."""
    job = analysis.Job()
    current: analysis.Call | None = None
    while True:
        try:
            rec = next_record(deadline)
        except wire.Forgery as exc:
            job.forged = str(exc)
            return job
        if rec.job != job_id:
            job.forged = f"a signed record of job {rec.job} arrived during job {job_id} (the helper was driven " \
                         "by someone other than the judge)"
            return job
        b = rec.body
        if rec.type == wire.ITER:
            current = analysis.Call(int(b["i"]), str(b["phase"]), int(b["v"]), float(b["ms"]), float(b["ms_all"]),
                                    bool(b.get("checked")), bool(b.get("alias_input")),
                                    bool(b.get("persistent_output")), int(b.get("mutated_input", -1)),
                                    int(b.get("async_diff", -1)), [] if b.get("checked") else None, rec.received,
                                    int(b.get("t_ns", 0)))
            job.calls.append(current)
        elif rec.type == wire.OUTPUT:
            if current is None or current.outputs is None or int(b.get("i", -1)) != current.index:
                job.forged = f"an output record for iteration {b.get('i')} arrived out of place"
                return job
            try:
                current.outputs.append(decode(rec, int(b.get("k", 0))))
            except wire.Forgery as exc:
                job.forged = str(exc)
                return job
        elif rec.type == wire.ERROR:
            job.error, job.error_where, job.error_index = str(b.get("message", "")), str(b.get("where", "")), \
                int(b.get("i", -1))
        elif rec.type == wire.JOB_END:
            job.end = b
            return job


# ---------------------------------------------------------------------------------------------- configs
@dataclass
class Variant:
    seed: int
    state: dict[str, Any]
    plan: Any            # engine.harness.runtimes.base.CallPlan
    ref: tuple


@dataclass
class Prepared:
    name: str
    variants: list[Variant]
    tensors: list[Any] = field(default_factory=list)   # the judge's copy of every variant's argument tensors


def prepare(runtime: Any, cfg: Any, trials: int, device: Any) -> Prepared:
    """Set each variant up under its seed, capture how the candidate is called, compute the reference."""
    import torch
    variants: list[Variant] = []
    base_seed = cfg.seed * 1000
    for t in range(max(trials, 2)):
        seed = base_seed + t
        if t and runtime.shares_model_across_variants:
            runtime.reseed_inputs(cfg, seed, device)
        else:
            runtime.setup(cfg, seed, device)
        plan = runtime.call_plan(runtime.inputs())
        ref = tuple(x.detach().clone() if isinstance(x, torch.Tensor) else x
                    for x in runtime.reference(runtime.inputs()))
        variants.append(Variant(seed, runtime.save_state(), plan, ref))
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    return Prepared(cfg.name, variants)


def _plan_message(prep: Prepared) -> tuple[dict[str, Any], list[Any]]:
    """The `config` message: variant 0's argument tree, every variant's tensors, the model for ModelNew."""
    trees, per_variant = [], []
    for v in prep.variants:
        ts: list[Any] = []
        trees.append(wire.encode_args(tuple(v.plan.args), ts))
        per_variant.append(ts)
    if any(t != trees[0] for t in trees[1:]) or len({len(ts) for ts in per_variant}) != 1:
        # arguments beyond tensors differ between seeds: rotate nothing, use the first variant only
        per_variant, trees = per_variant[:1], trees[:1]
        prep.variants = prep.variants[:1]
    shapes = [[(t.shape, t.dtype) for t in ts] for ts in per_variant]
    if any(s != shapes[0] for s in shapes[1:]):
        per_variant, prep.variants = per_variant[:1], prep.variants[:1]
    tensors = [t for ts in per_variant for t in ts]
    header: dict[str, Any] = {"type": "config", "cid": prep.name, "kind": prep.variants[0].plan.kind,
                              "entry": prep.variants[0].plan.entry, "args": trees[0],
                              "variants": len(per_variant), "per_variant": len(per_variant[0])}
    plan = prep.variants[0].plan
    if plan.kind == "modelnew":
        state_tensors: list[Any] = []
        init = wire.encode_args(tuple(plan.model_init), state_tensors)
        state = {}
        for name, t in (plan.model_state or {}).items():
            state[name] = len(state_tensors)
            state_tensors.append(t)
        header["model"] = {"seed": plan.model_seed, "init": init, "state": state, "dtype": plan.model_dtype}
        tensors += state_tensors
    prep.tensors = [t for ts in per_variant for t in ts]
    return header, tensors


# ---------------------------------------------------------------------------------------------- the judge
class Judge:
    """One evaluation. Started cold (request first) or warm (`warm_up` before the request is `attach`ed)."""

    def __init__(self, timer: TimerSpec):
        self.timer = timer
        self.req: JudgeRequest = None  # type: ignore[assignment]  # set by attach
        self.out: ResultFile = None    # type: ignore[assignment]
        self.task: Task | None = None
        self.deadline = time.monotonic() + STANDBY_START_S
        self.runner: RunnerProcess | None = None
        self.local: LocalTimer | None = None
        self.job_id = 0
        self.t0 = time.monotonic()
        self.device: dict[str, Any] | None = None
        self.has_gpu = False
        self.jail_report: dict[str, Any] | None = None
        self.not_up: str | None = None     # why the runner did not come up, if it did not
        self._load: dict[str, Any] = {}
        self._runner_closed = False

    def attach(self, req: JudgeRequest, out: ResultFile) -> None:
        if req.timer != self.timer:
            raise RuntimeError(f"this judge runs timer {self.timer}, the request names {req.timer}")
        self.req, self.out = req, out
        self.task = Task.from_json(req.task)
        self.deadline = time.monotonic() + req.deadline_s
        self.t0 = time.monotonic()

    def spent(self, phase: str, since: float) -> float:
        """Add the time since `since` to a phase of the result's `seconds` (where an evaluation's time goes)."""
        now = time.monotonic()
        sec = self.out.data.seconds
        sec[phase] = round(sec.get(phase, 0.0) + now - since, 3)
        return now

    # -- runner plumbing -------------------------------------------------------------------------------
    def start_runner(self) -> None:
        """Spawn the jailed runner (it jails itself, imports torch and starts CUDA while we do the same)."""
        run = make_run_dir()
        self._run = run
        timer = stage_readonly(run.ro, Path(self.timer.so_path))
        self.runner = RunnerProcess.spawn(run)
        self.runner.send({"type": "setup", "jail": run.spec(die_with_parent=True).to_json(),
                          "timer_so": str(timer), "timer_module": self.timer.module_name})

    def warm_up(self) -> None:
        """Everything that needs no request: torch and its CUDA context here, the runner up to its hello."""
        import torch

        from engine.harness.device_info import gpu_info
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        self.device = gpu_info()
        self.has_gpu = torch.cuda.is_available()
        if self.has_gpu:
            torch.zeros(1, device="cuda")   # the context, now rather than inside the first measurement
            self.local = LocalTimer(self.timer.so_path, self.timer.module_name)
        self.not_up = self.runner_up()

    def _entry(self) -> str:
        return "forward" if self.req.direction == "forward" else "backward"

    def runner_up(self) -> str | None:
        """Wait for the jail report, the runner's start and its helper's hello; None when up, else why not."""
        assert self.runner is not None
        jailed = self.runner.reply(self.deadline - time.monotonic())
        if jailed.get("type") != "jailed":
            return f"the runner did not start: {jailed.get('message') or jailed}"
        self.jail_report = jailed["report"]
        ready = self.runner.reply(self.deadline - time.monotonic())
        if ready.get("type") == "no_gpu":
            return NO_GPU
        if ready.get("type") != "ready":
            return f"the runner did not start: {ready.get('message') or ready}"
        try:  # the helper's first signed record: it holds the key and writes to the judge
            hello = self.runner.next_record(self.deadline)
        except wire.Forgery as exc:
            return f"the timing helper's first record is not valid: {exc}"
        if hello.type != wire.HELLO:
            return f"the timing helper's first record is a {hello.name}, not its hello"
        return None

    def load_candidate(self) -> str | None:
        """Stage the request's candidate into the runner's read-only folder and have it imported."""
        assert self.runner is not None
        self._load = stage_candidate(self._run, self.req.candidate)
        if self.req.candidate.format != "kernelbench":
            self._load["entry"] = self._entry()
        self.runner.send(self._load)
        loaded = self.runner.reply(self.deadline - time.monotonic())
        if loaded.get("type") != "loaded":
            return f"the candidate failed to load: {loaded.get('message') or loaded}"
        return None

    def note_forgery(self) -> None:
        """A record the helper did not sign arrived at any point (even between jobs): the stream is void."""
        if self.runner is not None and self.runner.forged and self.req.integrity:
            self.out.data.integrity["@result-channel"] = analysis.fail(analysis.FORGERY, self.runner.forged).__dict__
            self.out.data.error = self.out.data.error or f"the result channel was forged: {self.runner.forged}"

    def run_job(self, cid: str, header: dict[str, Any], decode: Callable[[wire.Record, int], Any]) -> \
            tuple[analysis.Job, dict[str, Any]]:
        assert self.runner is not None
        self.job_id += 1
        self.runner.send({"type": "job", "job": self.job_id, "cid": cid, **header})
        job = collect(self.runner.next_record, self.job_id, self.deadline, decode)
        if job.forged:
            return job, {}
        return job, self.runner.reply(self.deadline - time.monotonic())

    def decoder(self) -> Callable[[wire.Record, int], Any]:
        assert self.runner is not None and self.local is not None
        key, local = self.runner.key, self.local

        def decode(rec: wire.Record, k: int) -> Any:
            b = rec.body
            if b.get("kind") == "none":
                return None
            if b.get("kind") == "scalar":
                return float(b["value"])
            flat = wire.tensor_from_bytes({**b, "strides": None}, rec.payload or b"", "cuda")
            if local.fingerprint(flat, wire.fingerprint_seed(key, rec.seq, k)) != int(str(b["fp"]), 16):
                raise wire.Forgery(f"the bytes of output {k} of iteration {b.get('i')} do not match their signed "
                                   "fingerprint (they were changed after the helper sent them)")
            device = "cpu" if str(b.get("device", "")).startswith("cpu") else "cuda"
            return wire.restride(flat, b.get("strides"), device)
        return decode

    # -- the evaluation ----------------------------------------------------------------------------------
    def run(self) -> None:
        """The evaluation of the attached request, on a warmed-up judge."""
        import torch

        from engine.harness.runtimes import runtime_for
        assert self.task is not None
        self.out.data.device = self.device
        self.out.data.jail = self.jail_report
        if not self.has_gpu:
            self.out.data.error = NO_GPU
            return
        if self.not_up:
            self.out.data.error = self.not_up
            return
        device = torch.device("cuda")
        self.out.progress("load")
        runtime = runtime_for(self.task, self.req.direction)
        t = self.spent("task_setup", self.t0)
        why = self.load_candidate()
        self.spent("candidate_load", t)
        if why:
            self.out.data.error = why
            return
        wanted = self.req.configs
        configs = [c for c in self.task.configs if not wanted or c.name in wanted]
        tol = analysis.Tolerance(runtime.spec.tolerance.atol, runtime.spec.tolerance.rtol,
                                 runtime.spec.max_mismatch_fraction)
        prepared: dict[str, Prepared] = {}
        all_ok = True
        decode = self.decoder()
        for cfg in configs:
            self.out.progress("correctness", cfg.name)
            t0 = time.monotonic()
            try:
                prep = prepare(runtime, cfg, self.req.trials, device)
                t = self.spent("reference", t0)
            except Exception as exc:  # noqa: BLE001 - the task's own code: a task problem, named as such
                self.out.data.error = (f"the task's reference failed on config {cfg.name}: {type(exc).__name__}: "
                                       f"{str(exc).strip()[:600]}")
                return
            header, tensors = _plan_message(prep)
            self.runner.send(header, tensors)  # type: ignore[union-attr]
            reply = self.runner.reply(self.deadline - time.monotonic())  # type: ignore[union-attr]
            t = self.spent("send_inputs", t)
            if reply.get("type") != "configured":
                res = {"ok": False, "reason": f"the candidate could not be set up: {reply.get('message')}"}
                self.out.data.correctness[cfg.name] = res
                all_ok = False
                self.out.write()
                continue
            k = len(prep.variants)
            job, done = self.run_job(cfg.name, {"mode": "check", "schedule": list(range(k)) * 2, "flush": True,
                                                "probe_inputs": True, "settle_ms": SETTLE_MS}, decode)
            compose = self._composer(runtime, prep)
            try:
                corr, integ = analysis.judge_check(job, [v.ref for v in prep.variants], compose, tol,
                                                   [v.seed for v in prep.variants])
            except Exception as exc:  # noqa: BLE001 - kbench's own failure: say so, keep the trace, go on
                self.out.data.traces[cfg.name] = traceback.format_exc(limit=12)[-6000:]
                corr = CorrectnessResult(False, f"the judge could not compare config {cfg.name} "
                                                f"({type(exc).__name__}: {str(exc).strip()[:400]}); a kbench "
                                                "failure, not a verdict on the kernel")
                integ = IntegrityResult(True)
            self.spent("check", t)
            corr.seconds = round(time.monotonic() - t0, 3)
            self.out.data.correctness[cfg.name] = corr.__dict__
            if self.req.integrity:
                self.out.data.integrity[cfg.name] = integ.__dict__
            all_ok &= corr.ok and (integ.ok or not self.req.integrity)
            self.out.write()
            if job.forged:
                self.out.data.error = f"the result channel was forged during config {cfg.name}: {job.forged}"
                return
            if done.get("fatal"):
                self.out.data.error = f"CUDA error after config {cfg.name}: {done.get('message')}"
                return
            if self.req.timing and all_ok and self._timed(cfg.name):
                prepared[cfg.name] = prep
            else:  # nothing more runs on this config (nor, once one failed, on any kept for timing): free
                # their tensors on both sides, a config can take GBs
                for name in [cfg.name] if all_ok else [*prepared, cfg.name]:
                    self.runner.send({"type": "drop", "cid": name})  # type: ignore[union-attr]
                    self.runner.reply(self.deadline - time.monotonic())  # type: ignore[union-attr]
                if not all_ok:
                    prepared.clear()
            del job, prep, compose, header, tensors
        if not (self.req.timing and all_ok):
            return
        # The candidate first, on every timed config; then its runner is stopped (with anything it left
        # running) before the judge times the null loop and the baselines, so no candidate code shares the
        # GPU with a baseline (and none can slow one down for this or, through the session, later candidates).
        jobs: dict[str, tuple[analysis.Job, dict[str, Any]]] = {}
        for cfg in configs:
            if not self._timed(cfg.name):
                continue
            self.out.progress("timing", cfg.name)
            t = time.monotonic()
            p = self.req.timing_params
            jobs[cfg.name] = self.run_job(cfg.name, {"mode": "time", "warmup": p.warmup, "min_iters": p.min_iters,
                                                     "max_iters": p.max_iters, "budget_s": p.budget_s,
                                                     "checks": p.checks, "flush": p.flush_l2}, decode)
            self.spent("timing", t)
            job, done = jobs[cfg.name]
            if job.forged:
                self.out.data.error = f"the result channel was forged while timing {cfg.name}: {job.forged}"
            elif done.get("fatal"):
                self.out.data.error = f"CUDA error while timing {cfg.name}: {done.get('message')}"
            if self.out.data.error:
                break
        self.close()
        t = time.monotonic()
        for name, (job, _) in jobs.items():
            self.out.progress("baselines", name)
            self.out.data.timing[name] = self.time_config(runtime, prepared[name], tol, job)
            self.out.write()
        self.spent("baselines", t)

    def _timed(self, name: str) -> bool:
        return not self.req.timing_configs or name in self.req.timing_configs

    def _composer(self, runtime: Any, prep: Prepared) -> Callable[[int, list[Any]], tuple]:
        def compose(v: int, outputs: list[Any]) -> tuple:
            runtime.restore_state(prep.variants[v].state)
            return runtime.compose(runtime.inputs(), outputs)
        return compose

    def time_config(self, runtime: Any, prep: Prepared, tol: analysis.Tolerance, job: analysis.Job) -> dict[str, Any]:
        """The verdict on a timing job of the candidate's (its runner already stopped), with the null loop and
        the baselines timed now by the judge alone, or the session's baselines where a re-timing agrees."""
        import torch
        p = self.req.timing_params
        assert self.local is not None
        known = self._session_baselines(runtime, prep)
        # The protocol's own cost on this GPU, with the candidate's argument sizes: a loop calling nothing.
        # Never taken from the session: it is cheap, and it anchors the checks of this candidate's clock.
        live = [t.clone() for t in prep.tensors[: len(prep.tensors) // max(len(prep.variants), 1)]]
        variants = [prep.tensors[i * len(live):(i + 1) * len(live)] for i in range(len(prep.variants))]
        null = self.local.time(lambda: None, live, variants if live else [], self._quick() if known else p)
        null_ms = analysis.summarise([c.ms_all for c in null.timed()], [c.ms_all for c in null.timed()],
                                     0.0).median_ms
        null_gap = analysis.median_gap_ms(null.timed())
        res = analysis.judge_timing(job, [v.ref for v in prep.variants], self._composer(runtime, prep), tol,
                                    null_ms, null_gap)
        if self.req.integrity:
            self.out.data.integrity[f"{prep.name}@timing"] = res.integrity.__dict__
        if res.stats is None:
            return {"error": res.error or "no timed iterations"}
        row: dict[str, Any] = {"candidate": res.stats.to_json(), "hidden_work": res.hidden_work,
                               "witness": res.witness, "checked": job.end.get("checked", []),
                               "null": {"median_ms": null_ms, "gap_ms": null_gap}}
        if known is not None:
            row["baselines"] = {"from": "session", "recheck": known["recheck"]}
            for b in ("eager", "compile"):
                if b in known:
                    row[b] = known[b]
                    row[f"speedup_{b}"] = known[b]["median_ms"] / res.stats.median_ms
            if "compile_error" in known:
                row["compile_error"] = known["compile_error"]
            return row
        row["baselines"] = {"from": "measured"}
        runtime.restore_state(prep.variants[0].state)
        if "eager" in self.req.baselines:
            eager = self.local.time(runtime.eager_callable(), [], [], p)
            es = analysis.summarise([c.ms for c in eager.timed()], [c.ms_all for c in eager.timed()],
                                    null_ms)
            row["eager"] = es.to_json()
            row["speedup_eager"] = es.median_ms / res.stats.median_ms
        if "compile" in self.req.baselines:
            try:
                fn = runtime.compiled_callable()
                if fn is not None:
                    comp = self.local.time(fn, [], [], p)
                    cs = analysis.summarise([c.ms for c in comp.timed()], [c.ms_all for c in comp.timed()],
                                            null_ms)
                    row["compile"] = cs.to_json()
                    row["speedup_compile"] = cs.median_ms / res.stats.median_ms
            except Exception as exc:  # noqa: BLE001 - a baseline that cannot compile is absent, with the reason
                row["compile_error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
        torch.cuda.synchronize()
        return row

    def _session_baselines(self, runtime: Any, prep: Prepared) -> dict[str, Any] | None:
        """This config's baselines as measured earlier in the session (the request carries them), if a quick
        re-timing of one of them still agrees: then they are reused as they are, else all are measured anew."""
        known = (self.req.session_baselines or {}).get(prep.name)
        wanted = [b for b in ("eager", "compile") if b in self.req.baselines]
        # eager is re-timed (torch.compile would be compiled again to re-time it: the cost this saves); both
        # are the task's reference on the same GPU, so eager agreeing says the GPU's state has not moved
        if not known or "eager" not in wanted or "eager" not in known or \
                any(b not in known and f"{b}_error" not in known for b in wanted):
            return None
        which = "eager"
        try:
            runtime.restore_state(prep.variants[0].state)
            fn = runtime.eager_callable()
            assert self.local is not None
            job = self.local.time(fn, [], [], self._quick())
            now = analysis.summarise([c.ms for c in job.timed()], [c.ms_all for c in job.timed()], 0.0).median_ms
        except Exception:  # noqa: BLE001 - measure everything anew rather than fail the candidate
            return None
        then = float(known[which]["median_ms"])
        recheck = {"baseline": which, "now_ms": round(now, 5), "session_ms": round(then, 5)}
        if then <= 0 or abs(now / then - 1.0) > BASELINE_DRIFT:
            self.out.data.baseline_drift[prep.name] = recheck
            return None
        return {**known, "recheck": recheck}

    def _quick(self) -> Any:
        return dataclasses.replace(self.req.timing_params, warmup=3, min_iters=RECHECK_ITERS,
                                   max_iters=RECHECK_ITERS, budget_s=0.0)

    def close(self) -> None:
        """Stop the runner (once): after the candidate's last job, and whatever happens."""
        if self.runner is not None and not self._runner_closed:
            self._runner_closed = True
            self.runner.close()


def main(argv: list[str]) -> int:
    # killed with the process that asked (a Ctrl-C'd or killed kbench), so no judge holds the GPU's memory
    # afterwards; the runner already dies with the judge
    die_with_parent()
    if argv and argv[0] == "--standby":
        judge = Judge(TimerSpec(argv[1], argv[2]))
        warm_error = _warm(judge)
        # tell the pool whether this spare came up (cwd is its request folder): a spare that did not is never
        # handed a request, so its trouble cannot become the next candidate's verdict
        not_up = judge.not_up if judge.not_up != NO_GPU else None
        why = f"{type(warm_error).__name__}: {warm_error}" if warm_error else not_up
        Path(STANDBY_STATE).write_text(json.dumps({"ok": why is None, "why": why}))
        line = sys.stdin.readline().strip()   # the request, when one comes; EOF: we were not needed
        if not line:
            judge.close()
            return 0
        req = JudgeRequest.from_json(json.loads(Path(line).read_text()))
        out = ResultFile(Path(req.result_path))
        out.progress("start")
        judge.attach(req, out)
        out.data.warm = True
    else:
        req = JudgeRequest.from_json(json.loads(Path(argv[0]).read_text()))
        out = ResultFile(Path(req.result_path))
        out.progress("start")
        judge = Judge(req.timer)
        judge.attach(req, out)
        warm_error = _warm(judge)
        judge.spent("judge_start", judge.t0)
    try:
        if warm_error:
            raise warm_error
        judge.run()
        judge.note_forgery()
    except RunnerGone as exc:
        judge.note_forgery()
        where = out.data.progress or {}
        at = f" during {where.get('stage')}" + (f" of config {where['config']}" if where.get("config") else "")
        cause = str(exc)
        if cause == "timed out":
            cause = f"timed out after {req.deadline_s:.0f} s{at}; the runner was killed"
        else:
            cause = f"{cause}{at}"
        out.data.error = cause
        if where.get("stage") == "correctness" and where.get("config"):
            out.data.correctness[where["config"]] = {"ok": False, "reason": cause}
    except Exception as exc:  # noqa: BLE001
        out.data.traces["judge"] = traceback.format_exc(limit=12)[-6000:]
        out.data.error = f"judge error: {type(exc).__name__}: {str(exc).strip()[:600]} (traceback in the result's traces)"
    finally:
        judge.close()
        out.data.finished = True
        out.data.progress = None
        out.write()
    return 0


def _warm(judge: Judge) -> BaseException | None:
    """Start the runner and warm up; an exception is kept for the request's result, not raised here."""
    try:
        judge.start_runner()
        judge.warm_up()
        return None
    except BaseException as exc:  # noqa: BLE001 - reported in the result of the request that follows
        return exc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
