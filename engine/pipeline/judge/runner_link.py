"""The judge's end of its jailed runner: spawning it, waiting for it to come up, having it load the candidate
and take a config's arguments, running one job on it, and decoding the outputs its helper signs.

Every wait is bounded by the judge's deadline (an absolute `time.monotonic()`), passed in by the caller: a
standby judge's deadline moves when its request arrives. A runner that dies or overruns raises RunnerGone
(engine/pipeline/judge/runner_process.py), which the judge's entry point turns into the result's error.

The runner's replies are typed (engine/pipeline/protocol/messages.py) and may be the candidate's forgeries: each wait
takes any answer but the one it awaits (another kind, an error, a Garbled reply that did not parse, one that
names another config or job) as the step's failure, in the runner's words where it gave some.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from engine.gpu_wait import NO_GPU
from engine.harness.numerics import JUDGE
from engine.pipeline.judge import analysis
from engine.pipeline.judge.memory import out_of_memory
from engine.pipeline.judge.runner_process import RunDir, RunnerProcess, make_run_dir, stage_load, stage_readonly
from engine.pipeline.judge.timer import collect
from engine.pipeline.protocol import messages as msg
from engine.pipeline.protocol import wire
from engine.pipeline.protocol.types import CandidateSpec, TimerSpec

if TYPE_CHECKING:
    from engine.pipeline.judge.timer import LocalTimer


class OutputsTooLarge(RuntimeError):
    """The judge's GPU memory ran out while taking an output whose shape or dtype is not the reference's: its size
    is the candidate's doing, so this is its failure, never an excuse for leaving it unmeasured. (An output of the
    reference's shape and dtype is an allocation the judge needs for any candidate: its failing is weighed like
    the judge's own, engine/pipeline/judge/memory.py.)"""


def reference_sized(body: dict[str, Any], k: int, expected: list[tuple[tuple[int, ...], Any] | None]) -> bool:
    """Whether output `k` of a signed OUTPUT record has the shape and dtype of the reference's output `k`."""
    if not 0 <= k < len(expected) or expected[k] is None:
        return False
    shape, dtype = expected[k]
    try:
        return [int(d) for d in body.get("shape", [])] == list(shape) and wire.dtype_of(str(body["dtype"])) == dtype
    except (KeyError, TypeError, ValueError):
        return False


@dataclass
class Held:
    """A checked output of a timing job, in host memory until the job has ended (RunnerLink.decoder's `hold`)."""
    finish: Callable[[], Any]

    def settle(self) -> Any:
        """The output on the judge's GPU, checked against its signed fingerprint (wire.Forgery if it differs)."""
        return self.finish()


def settle(job: analysis.Job, call: analysis.Call | None = None) -> bool:
    """Bring a timing job's held outputs (or only `call`'s) to the judge's GPU and check them; a mismatch voids the
    job's stream (False). One call at a time where each is compared and freed before the next comes over: a
    timing job checks several calls, and a problem's output can take GBs."""
    for c in job.calls if call is None else [call]:
        if c.outputs or c.inputs_after:
            try:
                c.outputs = [o.settle() if isinstance(o, Held) else o for o in c.outputs or []]
                c.inputs_after = [o.settle() if isinstance(o, Held) else o for o in c.inputs_after or []]
            except wire.Forgery as exc:
                job.forged = job.forged or str(exc)
                return False
    return True


class RunnerLink:
    """One jailed runner, seen from the judge. Nothing it sends is trusted but the helper's signed records."""

    def __init__(self, timer: TimerSpec):
        self.timer = timer
        self.process: RunnerProcess | None = None
        self.jail_report: dict[str, Any] | None = None
        self.job_id = 0
        # the current config's reference outputs as (shape, dtype), set by the judge before its jobs
        self.expected_outputs: list[tuple[tuple[int, ...], Any] | None] = []
        self._run: RunDir | None = None
        self._closed = False

    def start(self, pin_arena: bool = False) -> None:
        """Spawn the jailed runner (it jails itself, imports torch and starts CUDA while we do the same);
        `pin_arena`: it page-locks the whole arena slot once up."""
        run = make_run_dir()
        self._run = run
        timer = stage_readonly(run.ro, Path(self.timer.so_path))
        self.process = RunnerProcess.spawn(run)
        spec = run.spec(die_with_parent=True, cgroup=self.process.cgroup_dirs())
        self.process.send(msg.Setup(jail=spec.to_json(), timer_so=str(timer), timer_module=self.timer.module_name,
                                    pin_arena=pin_arena, numerics=JUDGE.to_json()))

    def up(self, deadline: float) -> str | None:
        """Wait for the jail report, the runner's start and its helper's hello; None when up, else why not."""
        assert self.process is not None
        jailed = self.process.answer(deadline - time.monotonic())
        if not isinstance(jailed, msg.Jailed):
            return f"the runner did not start: {msg.explain(jailed)}"
        self.jail_report = jailed.report
        ready = self.process.answer(deadline - time.monotonic())
        if isinstance(ready, msg.NoGpu):
            return NO_GPU
        if not isinstance(ready, msg.Ready):
            return f"the runner did not start: {msg.explain(ready)}"
        try:  # the helper's first signed record: it holds the key and writes to the judge
            hello = self.process.next_record(deadline)
        except wire.Forgery as exc:
            return f"the timing helper's first record is not valid: {exc}"
        if hello.type != wire.HELLO:
            return f"the timing helper's first record is a {hello.name}, not its hello"
        return None

    def load(self, candidate: CandidateSpec, direction: str, deadline: float,
             numerics: dict[str, Any] | None = None) -> str | None:
        """Stage the candidate into the runner's read-only folder and have it imported, under `numerics` where
        given (else the settings the runner started with); None, else why not."""
        assert self.process is not None and self._run is not None
        load = dataclasses.replace(stage_load(self._run, candidate), numerics=numerics)
        if candidate.format != "kernelbench":
            load = dataclasses.replace(load, entry="forward" if direction == "forward" else "backward")
        self.process.send(load)
        loaded = self.process.answer(deadline - time.monotonic())
        if not isinstance(loaded, msg.Loaded):
            return f"the candidate failed to load: {msg.explain(loaded)}"
        return None

    def configure(self, config: msg.Config, tensors: list[Any], deadline: float) -> msg.Answer:
        """Send a config's `config` message (engine/pipeline/judge/configs.py); the runner's answer, Configured
        only for this config. The tensors go through the arena's slot when they fit (the slot is free between
        jobs), else through the socket."""
        assert self.process is not None
        arena = self.process.arena
        placed = arena.place(tensors) if arena is not None and tensors else None
        self.process.send(config, tensors, placed)
        answer = self.process.answer(deadline - time.monotonic())
        if isinstance(answer, msg.Configured) and answer.cid != config.cid:
            return msg.Garbled(f"`configured` names config {answer.cid[:80]!r}, not {config.cid!r}")
        return answer

    def drop(self, cid: str, deadline: float) -> None:
        """Have the runner free a config's tensors (a config can take GBs)."""
        assert self.process is not None
        self.process.send(msg.Drop(cid=cid))
        self.process.answer(deadline - time.monotonic())   # whatever it says: only its coming back matters

    def run_job(self, job: msg.Job, decode: Callable[[wire.Record, int], Any], deadline: float,
                on_checked: Callable[[analysis.Call], None] | None = None) -> tuple[analysis.Job, msg.Answer | None]:
        """One job on a configured config (`job`: the message, numbered here): its signed records, then the runner's
        closing answer (None if the records were forged: it is not read). `on_checked`: called with each checked
        call as soon as its outputs are in (timer.collect)."""
        assert self.process is not None
        self.job_id += 1
        self.process.send(dataclasses.replace(job, job=self.job_id))
        job = collect(self.process.next_record, self.job_id, deadline, decode, on_checked)
        if job.forged:
            return job, None
        answer = self.process.answer(deadline - time.monotonic())
        if isinstance(answer, msg.JobDone) and answer.job != self.job_id:
            return job, msg.Garbled(f"`job_done` names job {answer.job}, not {self.job_id}")
        return job, answer

    def decoder(self, local: LocalTimer, hold: bool = False) -> Callable[[wire.Record, int], Any]:
        """Output records to tensors on the judge's GPU, each checked against the fingerprint the helper signed for
        it. `hold`: each output's bytes stay in host memory (the judge's own copy) as a `Held`, moved and checked
        by `settle` once the job has ended: a timing job's checked outputs, so that the judge's GPU neither works
        nor holds them while the candidate is timed."""
        assert self.process is not None
        key, arena = self.process.key, self.process.arena
        where = "cpu" if hold else "cuda"

        def allocated(b: dict[str, Any], k: int, make: Callable[[], Any]) -> Any:
            try:
                return make()
            except RuntimeError as exc:
                if not out_of_memory(exc) or reference_sized(b, k, self.expected_outputs):
                    raise   # a reference-sized output is the judge's own allocation (judge.py weighs whose lack)
                raise OutputsTooLarge(f"the candidate's outputs exhausted the judge's GPU memory at output {k} "
                                      f"of iteration {b.get('i')} ({int(b.get('nbytes', 0)) >> 20} MiB, shape "
                                      f"{b.get('shape')} {b.get('dtype')}, not the reference's)") from exc

        def finish(flat: Any, b: dict[str, Any], seq: int, k: int) -> Any:
            if not flat.is_cuda:
                flat = allocated(b, k, lambda: flat.to("cuda"))
            if local.fingerprint(flat, wire.fingerprint_seed(key, seq, k)) != int(str(b["fp"]), 16):
                raise wire.Forgery(f"the bytes of output {k} of iteration {b.get('i')} do not match their signed "
                                   "fingerprint (they were changed after the helper sent them)")
            device = "cpu" if str(b.get("device", "")).startswith("cpu") else "cuda"
            return wire.restride(flat, b.get("strides"), device)

        def decode(rec: wire.Record, k: int) -> Any:
            b = rec.body
            if b.get("kind") == "none":
                return None
            if b.get("kind") == "scalar":
                return float(b["value"])
            if b.get("arena"):   # in the arena's slot (engine/pipeline/protocol/arena.py): copied out, slot released
                assert arena is not None   # the reader refuses arena records when there is no arena
                flat = allocated(b, k, lambda: wire.device_tensor(b, arena.take(int(b.get("nbytes", 0)), where)))
            else:
                flat = allocated(b, k, lambda: wire.tensor_from_bytes({**b, "strides": None}, rec.payload or b"",
                                                                      where))
            if hold:
                return Held(partial(finish, flat, b, rec.seq, k))
            return finish(flat, b, rec.seq, k)
        return decode

    @property
    def forged(self) -> str | None:
        """Why the record stream is void (a record the helper did not sign arrived at any point), if it is."""
        return self.process.forged if self.process is not None else None

    def close(self) -> None:
        """Stop the runner (once): after the candidate's last job, and whatever happens."""
        if self.process is not None and not self._closed:
            self._closed = True
            self.process.close()
