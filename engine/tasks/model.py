"""What a task is, once loaded: plain frozen dataclasses that cross process and module boundaries."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal

from engine.config.checks import ALL_CONFIGS, check_timing_names
from engine.errors import DataError, MissingDirectionError

Direction = Literal["forward", "backward"]
TaskFormat = Literal["native", "robust-kbench", "kernelbench"]

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


@dataclass(frozen=True)
class Cost:
    """Minimum work of one call: floating-point operations and bytes that must cross device memory."""

    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else float("inf")


def scaled(value: float, unit: str) -> str:
    """`2.68 GFLOP`, `1.07 GB`, `35 MFLOP`: three significant digits with the SI prefix that keeps the number
    below 1000 (a printed `2.68e+03 MFLOP` makes a person count digits). `kbench show` and the prompts' cost
    model write costs with it."""
    rounded = float(f"{value:.3g}")          # 999.6e6 rounds to 1e9: `1 GFLOP`, not `1e+03 MFLOP`
    for prefix, factor in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(rounded) >= factor:
            return f"{rounded / factor:.3g} {prefix}{unit}"
    return f"{rounded:.3g} {unit}"


@dataclass(frozen=True)
class DirectionSpec:
    direction: Direction
    signature: str
    tolerance: Tolerance
    reference_path: Path  # the python file holding forward_fn / Model / get_inputs for this direction
    # Fraction of elements allowed outside tolerance. Zero except where a correct kernel can flip a
    # discontinuity (ReLU at 0, max-pool ties) by rounding; the task says so in task.toml.
    max_mismatch_fraction: float = 0.0
    # Positions of forward_fn arguments that get no gradient (constant tables such as rotary cos/sin).
    no_grad: tuple[int, ...] = ()
    # The cost model as the task writes it (FLOPs, minimum bytes; in the configs' argument names), shown to the
    # LLM beside each config's values; empty where the task has none.
    cost_formulas: tuple[str, str] | tuple[()] = ()
    # Backward only: the kernel is called as robust-kbench calls it, as the class attribute
    # `AutogradFunction.backward_fn` with the arguments the reference's AutogradFunction.backward passes
    # (engine/harness/runtimes/autograd_fn.py), not as kbench's generic `backward(grad_output, *fn_args)`.
    autograd_backward: bool = False


@dataclass(frozen=True)
class TaskConfig:
    """One point of the task's test space: shapes x initialisation x seed."""

    name: str
    model_kwargs: dict[str, Any]
    input_kwargs: dict[str, Any]
    seed: int = 0
    init: str = "normal"
    cost: dict[str, Cost] = field(default_factory=dict)  # per direction; empty where unknown
    # Where the config comes from, e.g. ("robust-kbench", "single", "forward") for upstream's own settings or
    # ("kbench-addition",) for one kbench added to an imported task; free text for native tasks.
    tags: tuple[str, ...] = ()

    def label(self) -> str:
        args = {**self.model_kwargs, **self.input_kwargs}
        shown = ",".join(f"{k}={v}" for k, v in args.items())
        return f"{self.name}[{shown}|{self.init}|seed={self.seed}]"

    # Explicit, not engine.jsonable: the jailed profile child reads tasks, and its import path holds the standard
    # library and torch only (pydantic is not in reach there).
    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "model_kwargs": self.model_kwargs, "input_kwargs": self.input_kwargs,
            "seed": self.seed, "init": self.init,
            "cost": {d: {"flops": c.flops, "bytes": c.bytes} for d, c in self.cost.items()},
            "tags": list(self.tags),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any], what: str = "") -> "TaskConfig":
        try:
            return cls(name=obj["name"], model_kwargs=dict(obj["model_kwargs"]),
                       input_kwargs=dict(obj["input_kwargs"]), seed=int(obj.get("seed", 0)),
                       init=obj.get("init", "normal"),
                       cost={d: Cost(**c) for d, c in (obj.get("cost") or {}).items()},
                       tags=tuple(obj.get("tags") or ()))
        except (KeyError, TypeError, ValueError) as exc:
            name = obj.get("name", "?") if isinstance(obj, dict) else "?"
            raise DataError(f"{what or f'the task config {name!r}'}: not a valid TaskConfig ({type(exc).__name__}: "
                            f"{exc})") from None


@dataclass(frozen=True)
class Task:
    name: str
    root: Path
    format: TaskFormat
    description: str
    tags: tuple[str, ...]
    dtype: str
    directions: dict[str, DirectionSpec]
    configs: tuple[TaskConfig, ...]
    # `pure` or `engineering` (engine.integrity.policy); None: the session's or the default decides.
    library_policy: str | None = None
    # What a user should know about how kbench reads this task (an upstream quirk it works around, packages a
    # KernelBench problem needs); shown by `kbench show`.
    notes: tuple[str, ...] = ()

    def spec(self, direction: str) -> DirectionSpec:
        try:
            return self.directions[direction]
        except KeyError:
            have = ", ".join(self.directions) or "none"
            raise MissingDirectionError(f"task {self.name!r} ({self.root}) has no {direction} direction "
                                        f"(it has: {have})") from None

    def baseline_dir(self, direction: str) -> Path | None:
        path = self.root / "baselines" / direction
        # a CUDA baseline (kernel.cu), or a Triton one (kernel.py, engine/tasks/glue/triton.py)
        return path if (path / "kernel.cu").is_file() or (path / "kernel.py").is_file() else None

    def to_json(self) -> dict[str, Any]:
        """Everything the sandboxed evaluator needs to rebuild the task in a child process."""
        # Explicit, not engine.jsonable: each direction is flattened (tolerance as atol / rtol, no `direction`).
        return {
            "name": self.name, "root": str(self.root), "format": self.format,
            "description": self.description, "tags": list(self.tags), "dtype": self.dtype,
            "directions": {
                d: {"signature": s.signature, "atol": s.tolerance.atol, "rtol": s.tolerance.rtol,
                    "reference_path": str(s.reference_path),
                    "max_mismatch_fraction": s.max_mismatch_fraction, "no_grad": list(s.no_grad),
                    **({"cost_formulas": list(s.cost_formulas)} if s.cost_formulas else {}),
                    **({"autograd_backward": True} if s.autograd_backward else {})}
                for d, s in self.directions.items()
            },
            "configs": [c.to_json() for c in self.configs],
            "library_policy": self.library_policy,
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "Task":
        return cls(
            name=obj["name"], root=Path(obj["root"]), format=obj["format"],
            description=obj.get("description", ""), tags=tuple(obj.get("tags", ())), dtype=obj["dtype"],
            directions={
                d: DirectionSpec(direction=d, signature=s["signature"],
                                 tolerance=Tolerance(s["atol"], s["rtol"]),
                                 reference_path=Path(s["reference_path"]),
                                 max_mismatch_fraction=float(s.get("max_mismatch_fraction", 0.0)),
                                 no_grad=tuple(s.get("no_grad", ())),
                                 cost_formulas=tuple(s.get("cost_formulas") or ()),
                                 autograd_backward=bool(s.get("autograd_backward", False)))
                for d, s in obj["directions"].items()
            },
            configs=tuple(TaskConfig.from_json(c) for c in obj["configs"]),
            library_policy=obj.get("library_policy"),
            notes=tuple(obj.get("notes") or ()),
        )


# Which configs are timed. Correctness always covers every config the evaluation checks; timing costs a launch
# loop and the baselines per config, and an edge-case config (3x37x1000, a 10 us launch) says nothing about
# speed. So when the user names no timing configs, the task's representative ones are timed: the config named
# `bench` and those tagged `timed`. `default_timing_configs` is that rule, `timing_selection` applies it to a
# request (engine.pipeline.evaluate builds every judge request through it), `check_timing_names`
# (engine.config.checks, so the config file is held to it too) checks a
# request. docs/formats.md ("Which configs are timed") and the README say the same.
BENCH_CONFIG = "bench"
TIMED_TAG = "timed"
DEFAULT_TIMING_NOTE = (f"the default times `{BENCH_CONFIG}` and configs tagged `{TIMED_TAG}`; "
                       f"--time-config {ALL_CONFIGS} times every config")


UPSTREAM_TAG = "robust-kbench"


def direction_configs(task: Task, direction: str) -> list[str]:
    """The configs a direction is evaluated on: every config, except robust-kbench's own settings of the other
    direction only. Upstream runs a forward kernel on config_forward.json's settings and a backward one on
    config_backward.json's (robust_kbench/config_task.py); its backward files hold sizes (up to GiB tensors) its
    forward runs never see. A config says where it came from in its tags: `forward`/`backward` (an imported
    folder) or `from-forward`/`from-backward` (a built-in task)."""
    def applies(c: TaskConfig) -> bool:
        if UPSTREAM_TAG not in c.tags:
            return True
        origins = {t.removeprefix("from-") for t in c.tags if t.removeprefix("from-") in ("forward", "backward")}
        return not origins or direction in origins
    return [c.name for c in task.configs if applies(c)]


def default_timing_configs(task: Task) -> list[str] | None:
    """The configs timed when the user names none: the one named `bench` and those tagged `timed`, in the
    task's order. None (time every config) when the task has neither, so a KernelBench problem, a
    single-config task and an imported task without such tags are timed on every config."""
    names = [c.name for c in task.configs if c.name == BENCH_CONFIG or TIMED_TAG in c.tags]
    return names or None


def timing_selection(task: Task, timing_configs: Iterable[str] | None,
                     configs: Iterable[str] | None = None) -> list[str] | None:
    """What the judge times for a request (`JudgeRequest.timing_configs`: None = every config it checks).

    `timing_configs` as the user gave it: config names are kept as given; ["all"] is None; None or empty is
    the task's default (`default_timing_configs`), within `configs` when the evaluation checks only those, and
    every checked config when none of them is a default one (a `--config odd-small` evaluation times it)."""
    given = list(timing_configs or ())
    check_timing_names(given)
    if given:
        return None if ALL_CONFIGS in given else given
    default = default_timing_configs(task)
    if default is None:
        return None
    chosen = set(configs or ())
    if chosen:
        return [n for n in default if n in chosen] or None
    return default
