"""The control messages between the judge and its runner, typed (issue #22: types at the doors).

Every message on the control channel (framed by engine/pipeline/protocol/wire.py's Channel) is one frozen dataclass
here, checked when it is made; `to_wire()` is its JSON header, `{"type": KIND, <fields>}`, the shape the channel has
always carried (an optional field that is None, or `fatal` while False, is left off). Requests go judge -> runner,
replies runner -> judge.

The runner runs the candidate's code, which can write to the control socket: any reply may be forged or
garbled. `parse_reply` takes nothing on faith: a known reply kind, every field present with its JSON type, no
field it does not know, or MessageError naming the message. The judge's end (RunnerProcess.answer) makes such a
reply a `Garbled` answer, which each wait treats like any other reply it did not expect. Nothing a reply says is
a result anyway: results are the helper's signed records (wire.py).

Standard library only (and engine.timing_params, which is: the timing loop's parameters, the config's [timing]
section, carried whole as a `job` message's `timing`): the runner imports this before its jail, and the jail's
import path holds no third-party package (tests/jail/test_jailed_imports.py).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, TypeVar, Union, get_args, get_origin

from engine.timing_params import TimingParams

CLIP = 2000                       # characters of a runner's text that reach the judge's result
_OMIT = {"omit_default": True}    # left off the wire while it has its default (as the channel always did)


class MessageError(ValueError):
    """Not a message of this protocol: an unknown kind, a field missing, mistyped or unknown, or no JSON object."""


def _short(value: Any, limit: int = 80) -> str:
    """A forged value's repr, bounded (it is quoted in errors, and a reply can be 64 MiB)."""
    text = repr(value[:limit + 1] if isinstance(value, str) else value)   # a long string is not copied whole
    return text if len(text) <= limit else text[:limit] + "..."


def _conform(value: Any, tp: Any, where: str) -> Any:
    """`value` as a field of type `tp` holds it (a JSON list for a tuple, an int for a float), or MessageError."""
    if tp is Any:
        return value
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in get_args(tp):
            return None
        (inner,) = [a for a in get_args(tp) if a is not type(None)]
        return _conform(value, inner, where)
    if tp is bool and isinstance(value, bool) or tp is str and isinstance(value, str):
        return value
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            if math.isfinite(value):
                return float(value)
        except OverflowError:   # an int past any float
            pass
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _record(value, tp, where)
    if origin is tuple and isinstance(value, (list, tuple)):
        return tuple(_conform(v, get_args(tp)[0], f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict and isinstance(value, dict):
        _, vt = get_args(tp)
        bad = next((k for k in value if not isinstance(k, str)), None)
        if bad is not None:
            raise MessageError(f"{where} has a key that is not a string: {_short(bad)}")
        return {k: _conform(v, vt, f"{where}[{k[:40]!r}]") for k, v in value.items()}
    if tp not in (bool, str, int, float) and origin not in (tuple, dict):
        raise TypeError(f"{where}: messages cannot hold a {tp}")   # kbench's own mistake, not the runner's
    want = getattr(origin or tp, "__name__", str(tp))
    raise MessageError(f"{where} must be {'a finite ' if tp is float else ''}{want}, not "
                       f"{type(value).__name__}{f' {_short(value)}' if tp is float else ''}")


def _record(value: Any, tp: type, where: str) -> Any:
    """A dataclass field of a message (a JSON object on the wire): every field of `tp` present, none it lacks, each
    of its type. A field left out is an error rather than its default: the two sides must agree on every value."""
    if isinstance(value, tp):
        value = {f.name: getattr(value, f.name) for f in fields(tp)}
    if not isinstance(value, dict):
        raise MessageError(f"{where} must be an object ({tp.__name__}), not {type(value).__name__}")
    names = [f.name for f in fields(tp)]
    unknown = [k for k in value if k not in names]
    missing = [n for n in names if n not in value]
    if unknown or missing:
        raise MessageError(f"{where}: " + "; ".join(
            ([f"unknown field(s) {', '.join(_short(k, 40) for k in unknown[:5])}"] if unknown else []) +
            ([f"missing field(s) {', '.join(missing)}"] if missing else [])))
    hints = typing.get_type_hints(tp)
    return tp(**{n: _conform(value[n], hints[n], f"{where}.{n}") for n in names})


@dataclass(frozen=True)
class _Message:
    KIND: ClassVar[str] = ""
    _HINTS: ClassVar[dict[type, dict[str, Any]]] = {}

    def __post_init__(self) -> None:
        hints = self._HINTS.get(type(self))
        if hints is None:
            hints = self._HINTS[type(self)] = typing.get_type_hints(type(self))
        for f in fields(self):
            value = _conform(getattr(self, f.name), hints[f.name], f"`{self.KIND}` message: field `{f.name}`")
            object.__setattr__(self, f.name, value)
        self._check()

    def _check(self) -> None:
        """What a message's fields must say together (a subclass's rule; raises MessageError)."""

    def to_wire(self) -> dict[str, Any]:
        header: dict[str, Any] = {"type": self.KIND}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.default is None or f.metadata.get("omit_default") and value == f.default:
                continue
            header[f.name] = list(value) if isinstance(value, tuple) else \
                dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
        return header


# -- requests: judge -> runner -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Setup(_Message):
    """The runner's first message: how to jail itself, then where its timing helper is."""
    KIND: ClassVar[str] = "setup"
    jail: dict[str, Any]             # engine.jail.JailSpec.to_json()
    timer_so: str
    timer_module: str
    pin_arena: bool = False          # page-lock the arena's whole slot once up (a spare judge's runner)
    # the judge's numeric settings (engine.harness.numerics.Numerics), applied before the candidate is imported
    numerics: dict[str, Any] | None = None


@dataclass(frozen=True)
class Load(_Message):
    """Import the candidate staged in the run folder (runner_process.stage_load); also the profile child's."""
    KIND: ClassVar[str] = "load"
    module_name: str
    py_path: str | None = None       # a Python candidate (KernelBench), else
    so_path: str | None = None       # a compiled extension
    entry: str | None = None         # the function it must export ("forward"/"backward"; none for ModelNew)
    # numeric settings to apply before the import, where the request has its own (engine/pipeline/eval_mode.py)
    numerics: dict[str, Any] | None = None
    # py_path is a Triton candidate's folder (kernel.py + binding.py, engine/harness/triton_load.py)
    triton: bool = field(default=False, metadata=_OMIT)

    def _check(self) -> None:
        if (self.py_path is None) == (self.so_path is None):
            raise MessageError("`load` message: exactly one of `py_path` and `so_path` is needed")


@dataclass(frozen=True)
class Config(_Message):
    """A config's arguments (configs.plan_message); its tensors travel after it or in the arena."""
    KIND: ClassVar[str] = "config"
    cid: str
    kind: str                        # "fn" or "modelnew" (CallPlan.kind)
    entry: str
    args: Any                        # variant 0's argument tree (wire.encode_args)
    variants: int
    per_variant: int                 # tensors per variant; a ModelNew's state tensors follow all variants'
    model: dict[str, Any] | None = None   # ModelNew: {"seed", "init", "state", "dtype"}
    # per variant, the seed torch's generators get before every call (a reference that draws random numbers)
    call_seeds: tuple[int, ...] | None = None
    # per tensor of a variant: how each call's fresh values are drawn (engine/pipeline/judge/fresh.py; 0: a plain copy)
    fresh_modes: tuple[int, ...] | None = None
    fresh_alphas: tuple[float, ...] | None = None
    # the tensors of a variant the reference mutates in place: the helper leaves them out of its mutation probe
    # and sends them back after each checked call's outputs (engine/pipeline/judge/configs.py `mutations`)
    mutable_inputs: tuple[int, ...] = field(default=(), metadata=_OMIT)
    # the tensors' metas, which wire.Channel.send adds to the header: filled on the runner's side only
    tensors: tuple[dict[str, Any], ...] = field(default=(), metadata=_OMIT)

    def _check(self) -> None:
        if self.variants < 1 or self.per_variant < 0:
            raise MessageError(f"`config` message: {self.variants} variants of {self.per_variant} tensors")
        if (self.fresh_modes is None) != (self.fresh_alphas is None) or self.fresh_modes is not None and not \
                len(self.fresh_modes) == len(self.fresh_alphas or ()) == self.per_variant:
            raise MessageError(f"`config` message: fresh-input modes and spreads for {self.per_variant} tensors")
        if any(not 0 <= k < self.per_variant for k in self.mutable_inputs) or \
                list(self.mutable_inputs) != sorted(set(self.mutable_inputs)):
            raise MessageError(f"`config` message: mutable inputs {list(self.mutable_inputs)[:20]} of "
                               f"{self.per_variant} tensors")
        if self.call_seeds is not None and len(self.call_seeds) != self.variants:
            raise MessageError(f"`config` message: {len(self.call_seeds)} call seeds for {self.variants} variants")
        if (self.kind == "modelnew") != (self.model is not None):
            raise MessageError(f"`config` message: a `{self.kind[:40]}` call with{'out' if self.model is None else ''}"
                               " a model (only ModelNew has one)")


@dataclass(frozen=True)
class Job(_Message):
    """Run a configured config through the timing helper (engine/pipeline/protocol/helper_call.py); its results come as
    signed records."""
    KIND: ClassVar[str] = "job"
    job: int
    cid: str
    mode: str                        # "check" or "time"
    schedule: tuple[int, ...] = ()   # check: the variant of each checked call
    # time: the timing loop's parameters, the judge's request's (the config's [timing], flags merged), whole
    timing: TimingParams | None = None
    probe_inputs: bool = False       # the mutation probe (the config's mutable inputs left out)
    settle_ms: float = -1.0

    def _check(self) -> None:
        if self.mode not in ("check", "time"):
            raise MessageError(f"`job` message: mode {_short(self.mode, 40)}, not check or time")
        if self.mode == "time" and self.timing is None:
            raise MessageError("`job` message: a timing job without its `timing` parameters")
        if self.timing is not None and (bad := self.timing.problems()):
            raise MessageError(f"`job` message: timing {'; '.join(bad)}")


@dataclass(frozen=True)
class Drop(_Message):
    KIND: ClassVar[str] = "drop"
    cid: str


@dataclass(frozen=True)
class Ping(_Message):
    KIND: ClassVar[str] = "ping"


@dataclass(frozen=True)
class Exit(_Message):
    KIND: ClassVar[str] = "exit"


# -- replies: runner -> judge (forgeable) ----------------------------------------------------------------------
@dataclass(frozen=True)
class Jailed(_Message):
    KIND: ClassVar[str] = "jailed"
    report: dict[str, Any]           # engine.jail.JailReport.to_json(), sent before any candidate code ran


@dataclass(frozen=True)
class NoGpu(_Message):
    KIND: ClassVar[str] = "no_gpu"


@dataclass(frozen=True)
class Ready(_Message):
    KIND: ClassVar[str] = "ready"
    device: dict[str, str]           # {"gpu": its name}
    pid: int


@dataclass(frozen=True)
class Loaded(_Message):
    KIND: ClassVar[str] = "loaded"


@dataclass(frozen=True)
class Configured(_Message):
    KIND: ClassVar[str] = "configured"
    cid: str


@dataclass(frozen=True)
class JobDone(_Message):
    KIND: ClassVar[str] = "job_done"
    job: int
    status: str                      # the helper's own word on the job; the records are what count
    fatal: bool = field(default=False, metadata=_OMIT)   # a sticky CUDA error: the runner exits after this
    message: str | None = None
    # the runner's own word on its peak GPU allocation for this config (its setup, its tensors and the job's calls)
    # and on what it kept meanwhile for other configs to be timed: figures for the memory report
    # (JudgeResult.memory), never evidence in a verdict
    peak_bytes: int | None = None
    kept_bytes: int | None = None

    def _check(self) -> None:
        if self.fatal and self.message is None:
            raise MessageError("`job_done` message: `fatal` without a `message`")


@dataclass(frozen=True)
class Error(_Message):
    """The runner could not do what it was asked (the candidate raised, or the request made no sense)."""
    KIND: ClassVar[str] = "error"
    message: str
    fatal: bool = field(default=False, metadata=_OMIT)   # the runner exits after this
    trace: str | None = None


@dataclass(frozen=True)
class Dropped(_Message):
    KIND: ClassVar[str] = "dropped"


@dataclass(frozen=True)
class Pong(_Message):
    KIND: ClassVar[str] = "pong"


@dataclass(frozen=True)
class Garbled:
    """Not a message: what the judge makes of a reply that is not one (never sent, never parsed)."""
    why: str


Request = Union[Setup, Load, Config, Job, Drop, Ping, Exit]
Reply = Union[Jailed, NoGpu, Ready, Loaded, Configured, JobDone, Error, Dropped, Pong]
Answer = Union[Reply, Garbled]       # what the judge gets back: a reply, or why the bytes were none
M = TypeVar("M", bound=_Message)

_REQUESTS: dict[str, type[_Message]] = {c.KIND: c for c in get_args(Request)}
_REPLIES: dict[str, type[_Message]] = {c.KIND: c for c in get_args(Reply)}


def parse_request(obj: Any) -> Request:
    """A request the runner received (from the trusted judge: a failure here is kbench's bug)."""
    return _parse(obj, _REQUESTS, "request")   # type: ignore[return-value]


def parse_reply(obj: Any) -> Reply:
    """A reply the judge received: strictly checked, since the candidate may have written it."""
    return _parse(obj, _REPLIES, "reply")   # type: ignore[return-value]


def parse_as(obj: Any, cls: type[M]) -> M:
    """`obj` as a message of one kind (the profile child's `load`, read from its request file)."""
    return _parse(obj, {cls.KIND: cls}, f"`{cls.KIND}` message")   # type: ignore[return-value]


def _parse(obj: Any, kinds: dict[str, type[_Message]], what: str) -> _Message:
    if not isinstance(obj, dict):
        raise MessageError(f"a {what} that is not a JSON object but {type(obj).__name__}")
    kind = obj.get("type")
    cls = kinds.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise MessageError(f"a {what} of unknown type {_short(kind)}")
    names = {f.name for f in fields(cls)}
    body = {k: v for k, v in obj.items() if k != "type"}
    if "tensors" not in names and "tensors" in body:   # wire.Channel.send lists the tensors of every message
        if body.pop("tensors") != []:
            raise MessageError(f"`{kind}` message: announces tensors")
    unknown = [k for k in body if k not in names]
    if unknown:
        raise MessageError(f"`{kind}` message: unknown field(s) {', '.join(_short(k, 40) for k in unknown[:5])}")
    missing = [f.name for f in fields(cls)
               if f.name not in body and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise MessageError(f"`{kind}` message: missing field(s) {', '.join(missing)}")
    return cls(**body)


def explain(answer: Answer) -> str:
    """A reply that was not the one awaited, in words for the result: the runner's reason when it gave one."""
    if isinstance(answer, Garbled):
        return f"a malformed reply ({answer.why})"
    if isinstance(answer, (Error, JobDone)) and answer.message:
        return _clip(answer.message)
    return f"an unexpected `{answer.KIND}` reply"


def fatal_reason(answer: Answer | None) -> str | None:
    """Why the runner can do nothing more, when its reply says so (it exits after sending it); else None."""
    if isinstance(answer, (Error, JobDone)) and answer.fatal:
        return _clip(answer.message or "")
    return None


def _clip(text: str) -> str:
    return text if len(text) <= CLIP else text[:CLIP] + " [...]"
