"""The judge's side of the compiled timing helper: reading one job's signed records (`collect`), and the
judge's own instance of the helper (`LocalTimer`), which times the null loop and the baselines and checks
output fingerprints.

`collect` reads the records of the candidate's helper (through the runner, engine/pipeline/judge/runner_link.py)
and of the judge's own alike; a forged stream ends the job with `forged` set, never with an exception.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from engine.harness.build.stage import load_extension
from engine.pipeline.judge import analysis
from engine.pipeline.protocol import messages as msg
from engine.pipeline.protocol import wire
from engine.pipeline.protocol.helper_call import run_helper

if TYPE_CHECKING:
    from engine.config.sections import TimingParams


class LocalTimer:
    """The judge's own instance of the compiled helper: baselines and the null loop are timed with exactly
    the protocol the candidate is timed with; output fingerprints are checked with its kernel.

    Its records go to an unlinked temporary file, read back after each job: a thread draining a pipe would
    compete for the GIL with the timed calls' Python and slow the baselines down."""

    def __init__(self, so_path: str, module_name: str):
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

    def rebuild(self, tensors: list[Any], seed: int, modes: tuple[int, ...], alphas: tuple[float, ...]) -> list[Any]:
        """A call's fresh inputs rebuilt from its variant's tensors and seed with the helper's own kernel, bit for
        bit what the candidate's helper gave it (engine/pipeline/judge/fresh.py)."""
        return list(self.mod.fresh_args(tensors, seed, list(modes), list(alphas)))

    def hasher(self) -> Callable[[Any], int]:
        """A hash of a tensor's bytes on its own device (the fingerprint kernel under a seed drawn now): how the
        judge tells outputs apart once they are freed (engine/pipeline/judge/digest.py)."""
        seed = int.from_bytes(os.urandom(8), "little")
        return lambda t: self.fingerprint(t.contiguous(), seed)

    def time(self, call: Callable[[], Any], live: list[Any], variants: list[list[Any]],
             p: TimingParams, checks: int = 0, fresh: tuple[tuple[int, ...], tuple[float, ...]] = ((), ())
             ) -> analysis.Job:
        """One timing job of the judge's own (`fresh`: the candidate's fresh-input modes and spreads, for the null
        loop: it pays what the candidate's loop pays between calls)."""
        self._job += 1
        job_id = self._job
        run_helper(self.mod, msg.Job(job=job_id, cid="", mode="time", timing=dataclasses.replace(p, checks=checks)),
                   call, live, variants, fresh[0], fresh[1])
        job = collect(lambda deadline: self.reader.read(), job_id, 0.0, decode=lambda rec, k: None)
        for c in job.calls:  # our own clock, written by the helper as it went
            c.received = c.t_ns / 1e9
        return job


def collect(next_record: Callable[[float], wire.Record], job_id: int, deadline: float,
            decode: Callable[[wire.Record, int], Any],
            on_checked: Callable[[analysis.Call], None] | None = None) -> analysis.Job:
    """Read one job's records (JOB_BEGIN .. JOB_END). A forged stream ends the job with `forged` set.
    `on_checked`: called with each checked call once its outputs are all in (the judge digests it there). A checked
    call's OUTPUT records past its `outputs` carry the arguments it may change in place (its `mutable`), as it left
    them."""
    job = analysis.Job()
    current: analysis.Call | None = None

    def complete(call: analysis.Call) -> None:
        if on_checked is not None and call.outputs is not None and len(call.outputs) == call.n_outputs and \
                len(call.inputs_after or []) == len(call.mutable):
            on_checked(call)
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
                                    int(b.get("t_ns", 0)), int(b.get("outputs", 0)), int(str(b.get("seed", "0")), 16),
                                    mutable=tuple(int(k) for k in b.get("mutable", [])),
                                    inputs_after=[] if b.get("checked") else None)
            job.calls.append(current)
            complete(current)
        elif rec.type == wire.OUTPUT:
            if current is None or current.outputs is None or int(b.get("i", -1)) != current.index:
                job.forged = f"an output record for iteration {b.get('i')} arrived out of place"
                return job
            try:
                value = decode(rec, int(b.get("k", 0)))
                if len(current.outputs) < current.n_outputs:
                    current.outputs.append(value)
                elif current.inputs_after is not None and len(current.inputs_after) < len(current.mutable):
                    current.inputs_after.append(value)
                else:
                    job.forged = f"more output records than announced for iteration {b.get('i')}"
                    return job
            except wire.Forgery as exc:
                job.forged = str(exc)
                return job
            complete(current)
        elif rec.type == wire.ERROR:
            job.error, job.error_where, job.error_index = str(b.get("message", "")), str(b.get("where", "")), \
                int(b.get("i", -1))
        elif rec.type == wire.JOB_END:
            job.end = b
            return job
