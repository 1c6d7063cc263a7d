"""What evaluate() takes and gives, on the parent side: EvalOptions, and the EvalReport of ConfigRows every
caller reads (engine/pipeline/protocol/types.py holds what crosses to the judge and back).

`options_from_config` is the one rule from the config (its [eval] section, flags already merged into it by
engine.config.load.load_config) to EvalOptions: `kbench eval`, `kbench evolve`, `kbench reevaluate` and the app all
build theirs through it (the last three through engine.evolve.factory.make_evaluator), so a key or a flag means the
same thing to every command.

In their own module so that evaluate.py, which runs the stages, and verdicts.py and profiling.py, which it
calls, all import them without importing one another; evaluate.py re-exports them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.config.env import cache_root

from engine.config.sections import TimingParams
from engine.config.sections import GPU_KEEP
from engine.harness.stats import geomean
from engine.verdict import Judgement, Verdict, effective, judge_verdicts

if TYPE_CHECKING:
    from engine.config.sections import Config


def default_cache_root() -> Path:
    return cache_root()


@dataclass
class EvalOptions:
    configs: list[str] | None = None       # None: every config
    # Time only these (correctness still covers `configs`); ["all"]: every config; None: the task's default,
    # `bench` and the configs tagged `timed` (engine.tasks.model.timing_selection)
    timing_configs: list[str] | None = None
    trials: int | None = None              # None: the mode's (kbench 2, upstream 5; engine/pipeline/eval_mode.py)
    timing: bool = True
    baselines: tuple[str, ...] = ("eager", "compile")
    timeout_s: float = 600.0
    build_timeout_s: float = 600.0
    gpu: int | None = None
    cache_root: Path = field(default_factory=default_cache_root)
    # the timing loop's parameters (the config's [timing] section): carried to the judge in its request as they are
    timing_params: TimingParams = field(default_factory=TimingParams)
    roofline: bool = True                   # place results on the measured roofline (measured once per GPU)
    integrity: bool = True                  # static reward-hack scan before compile, the judge's integrity verdict
    override_static: bool = False           # a person's override: go on to compile despite a static `fail`
    # Whether evaluate() runs the static gate itself. An evolution's loop runs the static stage once, before it
    # submits a candidate, and honours a person's override there (engine/evolve/checks.py): its evaluations
    # leave it out rather than scan again and have their verdict dropped.
    static_gate: bool = True
    # "pure" | "engineering"; None: the task's, else "pure" (engine.integrity.policy)
    library_policy: str | None = None
    # After timing, for candidates that pass: the `profile` stage (engine/profile), whose summary feeds the
    # mutate and repair prompts. `skipped` with the reason where ncu is missing or not permitted.
    profile: bool = True
    # Keep a spare judge (its runner jailed, CUDA up) for the next evaluation on this GPU: for long-lived
    # evaluating threads (an executor's GPU worker); engine/pipeline/warm.py.
    warm: bool = False
    # Reuse this session's eager / torch.compile / null-loop timings of a config (engine/pipeline/baselines.py)
    # after a quick re-timing agrees, instead of measuring them for every candidate.
    reuse_baselines: bool = False
    # The disk cache of baselines (engine/pipeline/baseline_cache.py): "use" reads it (the judge re-times eager and
    # reuses an entry within 10 %) and keeps what the judge measured, "fresh" measures everything and keeps it,
    # "off" neither. `kbench eval` uses it (`--fresh-baselines`: "fresh").
    baseline_cache: str = "off"
    # "kbench" (the default) or "upstream": robust-kbench's / KernelBench's own evaluation settings
    # (engine/pipeline/eval_mode.py); the report records it
    mode: str = "kbench"
    # the share of the GPU's memory the judge may keep prepared variants in before it parks a config's in host
    # memory (JudgeRequest.gpu_keep); 0 parks every config's: the least GPU memory, a slower check
    gpu_keep: float = GPU_KEEP
    # seconds `kbench eval` leaves a judge up for the next command ([eval] keep_judge_s); 0: none. Only the CLI's
    # `eval` acts on it (engine/pipeline/kept_judge.py): sessions keep their own spares (`warm`)
    keep_judge_s: float = 0.0


def options_from_config(config: Config, **overrides: Any) -> EvalOptions:
    """EvalOptions from the config's `[eval]` and `[timing]` sections; keyword overrides (what only one run decides:
    its configs,
    its GPU, the disk cache of baselines) win where they are not None. Flags that stand for a config key are merged
    into `config` by load_config before this, so a flag and its key cannot be read two ways.

    Only `[eval] profile = "all"` profiles inside every evaluation; with "best" the evaluations leave it out
    and a session asks its evaluator to profile each new best on its own (`Evaluator.profile`)."""
    e = config.eval
    kw: dict[str, Any] = {"trials": e.trials, "timeout_s": e.timeout_s, "profile": e.profile == "all",
                          "timing_configs": list(e.timing_configs) if e.timing_configs else None,
                          "baselines": ("eager", "compile") if e.compile_baseline else ("eager",),
                          "library_policy": e.library_policy, "mode": e.mode, "timing_params": config.timing,
                          "gpu_keep": e.gpu_keep, "keep_judge_s": e.keep_judge_s}
    kw.update({k: v for k, v in overrides.items() if v is not None})
    return EvalOptions(**kw)


@dataclass
class ConfigRow:
    name: str
    correct: bool | None = None
    reason: str = ""
    max_abs_err: float | None = None
    candidate_ms: float | None = None
    candidate_iqr_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    hidden_work: bool = False
    floor_ms: float | None = None          # physical floor from the cost model and measured peaks
    roofline_fraction: float | None = None
    baselines: str = ""                    # "measured" by this evaluation, reused from the "session" or the "cache"
    timed: bool = True                     # chosen for timing (engine.tasks.model.timing_selection)
    # the argument tensors the reference mutates in place (a BatchNorm's running statistics): checked after each call
    mutated_by_reference: list[int] = field(default_factory=list)


@dataclass
class EvalReport:
    task: str
    direction: str
    candidate: str           # source hash
    format: str
    verdicts: list[Verdict]
    rows: list[ConfigRow]
    device: dict[str, Any]
    build: dict[str, Any]
    seconds: float = 0.0
    # Set when this machine could not check or time at all (no GPU visible): the kernel was not judged, so
    # an evolution loop leaves the candidate pending for a machine that can (EvalOutcome.infra_error).
    unmeasured: str = ""
    jail: dict[str, Any] = field(default_factory=dict)   # the runner's jail (engine.jail.JailReport.to_json())
    # the numeric settings (TF32, matmul precision, deterministic modes) the judge and the runner started with
    numerics: dict[str, Any] = field(default_factory=dict)
    # per config: its footprint and the judge's and runner's peak GPU memory
    # (engine.pipeline.protocol.result.ConfigMemory)
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)
    traces: dict[str, str] = field(default_factory=dict)  # the judge's own failures (tracebacks), if any
    # Seconds by phase: build, judge (judge.judge_start, judge.task_setup, judge.reference, judge.check,
    # judge.timing, judge.baselines, ...), baselines.cache_read / cache_write, profile; and counts beside them:
    # build.cache_hit (1 or 0), judge.warm (1: a spare judge), baselines.cached (configs whose baselines came from
    # the disk cache)
    phases: dict[str, float] = field(default_factory=dict)
    # Set when the judge measured twice because the first measurement failed a contention-sensitive check
    # (contention_sensitive): what the first one saw, the host's load, what the second saw ("" if clean).
    remeasured: dict[str, str] = field(default_factory=dict)
    # How the timed configs (ConfigRow.timed) were chosen: "default" (the task's `bench` and `timed` configs),
    # "all", or "named" (--time-config / [eval] timing_configs); "" where nothing was to be timed.
    timed_by: str = ""
    # The disk cache of baselines (engine.pipeline.baseline_cache.BaselineCache.keep): hit, partial, miss, drift,
    # fresh; each timed config's source, the cached entries' age, the drift check's figures; {} where unused
    baselines: dict[str, Any] = field(default_factory=dict)
    # The evaluation mode and what it ran (engine.pipeline.eval_mode.ModePlan.to_json()): "kbench" or "upstream"
    mode: dict[str, Any] = field(default_factory=dict)
    # The timing loop's parameters the judge was sent (EvalOptions.timing_params: [timing] and its flags); None
    # where nothing was to be timed
    timing_params: TimingParams | None = None

    @property
    def judgement(self) -> Judgement:
        """engine.verdict.judge over this report's verdicts and its geomean speedup (the same rule as a
        workspace candidate's CandidateStatus.judgement)."""
        return judge_verdicts(self.verdicts, self.geomean_speedup_eager)

    @property
    def passed(self) -> bool:
        return self.judgement.passed

    def verdict(self, stage: str) -> Verdict | None:
        """The stage's effective verdict: its last (the one `judgement` reads), or None."""
        return effective(self.verdicts, stage)

    @property
    def geomean_speedup_eager(self) -> float | None:
        return geomean(r.speedup_eager for r in self.rows)

    @property
    def geomean_speedup_compile(self) -> float | None:
        return geomean(r.speedup_compile for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task, "direction": self.direction, "candidate": self.candidate, "format": self.format,
            "passed": self.passed, "why_not_passed": self.judgement.why_not_passed, "verdicts": [v.to_json() for v in self.verdicts],
            "configs": [r.__dict__ for r in self.rows], "device": self.device, "build": self.build,
            "geomean_speedup_eager": self.geomean_speedup_eager,
            "geomean_speedup_compile": self.geomean_speedup_compile, "seconds": round(self.seconds, 2),
            "jail": self.jail, "numerics": self.numerics, "memory": self.memory, "phases": self.phases, **({"traces": self.traces} if self.traces else {}),
            **({"remeasured": self.remeasured} if self.remeasured else {}),
            **({"timed_by": self.timed_by} if self.timed_by else {}),
            **({"baselines": self.baselines} if self.baselines else {}),
            **({"mode": self.mode} if self.mode else {}),
            **({"timing_params": dataclasses.asdict(self.timing_params)} if self.timing_params else {}),
        }
