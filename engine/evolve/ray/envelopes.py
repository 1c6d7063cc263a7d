"""What crosses between the Ray executor's driver (engine/evolve/ray/executor.py) and the tasks on the cluster's
nodes (engine/evolve/ray/tasks.py), as typed dataclasses:

    driver ─ BuildRequest ─▶ build_job ─ BuildReply (Built: summary + packed entry) ─▶ driver
    driver ─ EvalRequest (+ Built) ─▶ gpu_job ─ GpuReply (EvalOutcome) ─▶ driver
    driver ─ EvalRequest (+ device) ─▶ profile_job ─ ProfileReply (Verdict) ─▶ driver
    driver ─▶ probe_job ─ ProbeReply (architectures) ─▶ driver

Each crosses as its to_json() (engine.jsonable), not as a pickled instance: a node running another kbench
(ship_code off) reads what it knows and ignores fields a later kbench adds, and from_json turns a malformed
envelope into an EnvelopeError (a DataError) that names the envelope and the field, on whichever side reads
it. The one value the codec cannot write is the packed build entry (bytes, not UTF-8): Built.to_json keeps it
as bytes beside the JSON, which Ray carries as it is (base64 would grow an archive of up to MAX_ARCHIVE_BYTES
by a third).

Ray-free, so that the envelopes can be built and checked where Ray is not installed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Self

from engine import jsonable
from engine.candidates import Candidate
from engine.errors import DataError
from engine.evolve.outcome import EvalOutcome
from engine.harness.build.result import BuildSummary
from engine.pipeline.eval_types import EvalOptions
from engine.verdict import Verdict


class EnvelopeError(DataError):
    """A malformed envelope: the driver and the node disagree on what crosses (other kbench versions), so the
    executor does not retry (engine/evolve/ray/jobs.py), unlike other DataErrors, which a task may meet in data
    of its own."""


class _Envelope:
    """to_json / from_json through engine.jsonable; WHAT names the envelope in the EnvelopeError."""

    WHAT: ClassVar[str] = "a Ray envelope"

    def to_json(self) -> dict[str, Any]:
        return jsonable.dump(self)

    @classmethod
    def from_json(cls, obj: Any, what: str = "") -> Self:
        try:
            return jsonable.load(cls, obj, what or cls.WHAT)
        except DataError as exc:
            raise EnvelopeError(str(exc)) from None


@dataclass(frozen=True)
class Where(_Envelope):
    """The node, host and process a task ran in; its CUDA_VISIBLE_DEVICES names the GPU Ray gave it."""

    node: str
    host: str
    pid: int
    cuda_visible_devices: str | None = None

    WHAT: ClassVar[str] = "where a Ray task ran"

    @property
    def gpu_id(self) -> str:
        """The key a GPU task's busy time is counted under (RayExecutor.stats()["gpu_busy_s"])."""
        return f"{self.host}:{self.cuda_visible_devices}"


@dataclass(frozen=True)
class Ran(_Envelope):
    """Where a task ran and when (its node's clock, seconds since the epoch): every reply carries one."""

    where: Where
    start: float
    end: float

    @property
    def interval(self) -> tuple[float, float]:
        return self.start, self.end

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Built(_Envelope):
    """What the compile task made, for the GPU task: the build's summary (its compile verdict), and on success
    the packed cache entry and the key of the toolchain it was built with (a GPU node with another toolchain
    compiles again rather than unpack it)."""

    build: BuildSummary
    archive: bytes | None = None        # engine.harness.build.archive.pack_entry; None: nothing to ship
    toolchain_key: str = ""

    WHAT: ClassVar[str] = "the Ray compile task's build"

    def to_json(self) -> dict[str, Any]:
        # the codec writes bytes as UTF-8 text, which a gzipped tar is not: the archive stays bytes (see above)
        return {**jsonable.dump(replace(self, archive=None)), "archive": self.archive}


@dataclass(frozen=True)
class BuildRequest(_Envelope):
    """The compile task's input: the candidate, the build's deadline, the architectures to target."""

    candidate: Candidate
    timeout_s: float = 600.0
    archs: str = ""                     # ";"-separated, as probed on a GPU node; "": the toolchain's own

    WHAT: ClassVar[str] = "the Ray compile task's request"


@dataclass(frozen=True)
class EvalRequest(_Envelope):
    """The GPU task's and the profile task's input: one evaluation of a candidate of the task.

    `options` cross as EvalOptions themselves; their `cache_root` and `gpu` name the driver's cache folder and
    GPU index, which mean nothing on a node: the node puts its own in (ray_tasks.worker_inputs)."""

    task: dict[str, Any]                # engine.tasks.portable.pack_task: the task and its reference files
    candidate: Candidate
    direction: str
    options: EvalOptions
    archs: str = ""                     # as BuildRequest.archs: the GPU node's toolchain key must match
    built: Built | None = None          # gpu task: the compile task's build; None: compiled (or found) there
    device: dict[str, Any] | None = None    # profile task: the evaluation's device (its GPU model's peaks)

    WHAT: ClassVar[str] = "the Ray GPU task's request"

    def to_json(self) -> dict[str, Any]:
        return _with_built(self, self.built)


@dataclass(frozen=True)
class BuildReply(_Envelope):
    """The compile task's answer. A candidate that does not compile is a failed build here, never an error."""

    built: Built
    ran: Ran

    WHAT: ClassVar[str] = "the Ray compile task's reply"

    def to_json(self) -> dict[str, Any]:
        return _with_built(self, self.built)


@dataclass(frozen=True)
class GpuReply(_Envelope):
    """The check-and-time task's answer: the evaluation's outcome; `ran` is the GPU's busy interval."""

    outcome: EvalOutcome
    ran: Ran

    WHAT: ClassVar[str] = "the Ray GPU task's reply"


@dataclass(frozen=True)
class ProfileReply(_Envelope):
    """The profile task's answer: the `profile` verdict; `ran` is the GPU's busy interval."""

    verdict: Verdict
    ran: Ran

    WHAT: ClassVar[str] = "the Ray profile task's reply"


@dataclass(frozen=True)
class ProbeReply(_Envelope):
    """A GPU node's answer to the probe: the architectures builds should target, or why it cannot compile."""

    where: Where
    archs: str = ""
    toolchain_key: str = ""
    error: str = ""

    WHAT: ClassVar[str] = "the Ray GPU node's probe reply"


def _with_built(envelope: EvalRequest | BuildReply, built: Built | None) -> dict[str, Any]:
    """An envelope holding a Built, its archive kept as bytes (Built.to_json)."""
    data = jsonable.dump(replace(envelope, built=None) if built is not None else envelope)
    if built is not None:
        data["built"] = built.to_json()
    return data
