"""Evaluation modes: kbench's own (the default) and `upstream`, which reproduces how robust-kbench and KernelBench
evaluate their tasks, for numbers comparable with their published results (`kbench eval --upstream`, `[eval] mode =
"upstream"`). docs/formats.md ("Evaluation modes") says what each adds.

kbench's mode checks every config of the direction on fresh-seed trials (2 by default), times the task's `bench` and
`timed` configs, builds with kbench's flags and judges with TF32 off everywhere (engine/harness/numerics.py).

`upstream`, on a robust-kbench task (an imported folder, or a built-in task tagged robust-kbench): robust-kbench's own
settings for the direction, all four of its settings modes (single, multi-input only, multi-init only, multi), each
checked on 5 trials and timed (upstream averages the mean time over the configs it runs); its nvcc flags (-O3
--use_fast_math, with the CUTLASS headers kbench puts on every build); torch's default precision, as upstream sets
none (cuDNN may use TF32, matmuls do not). On a KernelBench problem: 5 correctness trials, every config timed, and
torch's default precision (cuDNN TF32 on), as KernelBench's eval leaves it. The judge's other checks (fresh inputs,
integrity) stay: they never make a correct kernel fail. Its comparison is upstream's: with the float32 reference only,
without kbench's float64 second opinion (engine/pipeline/judge/exact.py), which could pass what upstream fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from engine.config.sections import EVAL_MODES as MODES
from engine.config.sections import MODE_TRIALS
from engine.errors import KbenchError
from engine.harness.numerics import Numerics
from engine.tasks.model import ALL_CONFIGS, UPSTREAM_TAG, Task, direction_configs

if TYPE_CHECKING:
    from engine.harness.toolchain import Toolchain

KBENCH, UPSTREAM = MODES
OWN_TRIALS = MODE_TRIALS[KBENCH]
UPSTREAM_TRIALS = MODE_TRIALS[UPSTREAM]   # robust-kbench's num_correct_trials; KernelBench's eval scripts' too
UPSTREAM_NVCC = ("--use_fast_math",)      # robust-kbench's COMPILE_FLAGS beside -O3, which kbench passes already
TORCH_DEFAULTS = Numerics(cudnn_tf32=True)   # torch's own: cuDNN may use TF32, matmuls do not
# robust-kbench's settings modes, as config tags (engine/tasks/robust_kbench.py, SETTINGS_MODES)
SETTINGS_TAGS = ("single", "multi-input", "multi-init", "multi")


class ModeError(KbenchError):
    """A mode that does not apply to the task (upstream mode on a task that comes from neither benchmark)."""


@dataclass(frozen=True)
class ModePlan:
    """What an evaluation runs under its mode; evaluate() builds the judge's request from it."""
    mode: str
    configs: list[str] | None              # None: every config
    timing_configs: list[str] | None       # as the user gives them (["all"]: every checked config)
    trials: int
    nvcc_flags: tuple[str, ...] = ()       # added to every nvcc run of the candidate's build
    numerics: Numerics | None = None       # None: the judge's own (engine.harness.numerics.JUDGE)
    # upstream's settings mode -> the configs it holds (robust-kbench tasks)
    settings: dict[str, list[str]] = field(default_factory=dict)
    # the trials' seeds and draws as upstream makes them: an imported folder or problem file runs upstream's own
    # code; a built-in task's reference is kbench's rewrite, whose draws upstream never made
    upstream_draws: bool = False

    @property
    def float64_opinion(self) -> bool:
        """Whether a call that misses the float32 reference is compared with the float64 one (engine/pipeline/judge/
        exact.py): not in the upstream mode, whose benchmarks compare with their float32 reference only."""
        return self.mode != UPSTREAM

    def candidate_toolchain(self, base: Toolchain) -> Toolchain:
        """The toolchain the candidate's build runs under this mode: the machine's, with the mode's nvcc flags. The
        one place that says so, so a prebuild (scripts/bench_vs_published.py) fills the cache entries the
        evaluation then reads."""
        return replace(base, extra_nvcc=self.nvcc_flags) if self.nvcc_flags else base

    def to_json(self) -> dict:
        return {"mode": self.mode, "float64_opinion": self.float64_opinion, "configs": self.configs,
                "timing_configs": self.timing_configs, "trials": self.trials, "nvcc_flags": list(self.nvcc_flags),
                "numerics": self.numerics.to_json() if self.numerics else None, "settings": self.settings,
                "seeds": "upstream" if self.upstream_draws else "kbench"}

    def describe(self) -> str:
        """One paragraph for the terminal: what this mode runs."""
        if self.mode == KBENCH:
            return "mode kbench"
        parts = [f"mode upstream: {self.trials} trials per config"]
        if self.settings:
            parts.append("settings " + ", ".join(f"{m} ({len(n)})" for m, n in self.settings.items()))
        parts.append(f"{len(self.configs) if self.configs is not None else 'every'} configs, all timed")
        if self.nvcc_flags:
            parts.append("nvcc " + " ".join(self.nvcc_flags))
        parts.append("upstream's trial seeds (42, then one randint per trial)" if self.upstream_draws else
                     "kbench's seeds (a built-in task's reference draws its own way)")
        if self.numerics:
            parts.append("torch's default precision (cuDNN TF32 "
                         f"{'on' if self.numerics.cudnn_tf32 else 'off'}, matmul TF32 "
                         f"{'on' if self.numerics.matmul_tf32 else 'off'})")
        parts.append("compared with the float32 reference only (no float64 second opinion)")
        return "; ".join(parts)


def is_robust_kbench(task: Task) -> bool:
    return task.format == "robust-kbench" or (UPSTREAM_TAG in task.tags and
                                               any(UPSTREAM_TAG in c.tags for c in task.configs))


def plan(task: Task, direction: str, mode: str, configs: list[str] | None = None,
         timing_configs: list[str] | None = None, trials: int | None = None) -> ModePlan:
    """The plan for `mode`; what the user named (configs, timing configs, trials) wins over the mode's choice."""
    if mode not in MODES:
        raise ModeError(f"evaluation mode {mode!r} is not one of {', '.join(MODES)}")
    own = direction_configs(task, direction)
    if mode == KBENCH:
        narrowed = None if len(own) == len(task.configs) else own
        return ModePlan(KBENCH, configs if configs else narrowed, timing_configs, trials or OWN_TRIALS)
    if is_robust_kbench(task):
        names = [c.name for c in task.configs if c.name in own and UPSTREAM_TAG in c.tags]
        settings = {m: [c.name for c in task.configs if c.name in names and m in c.tags] for m in SETTINGS_TAGS}
        return ModePlan(UPSTREAM, configs or names, timing_configs or [ALL_CONFIGS], trials or UPSTREAM_TRIALS,
                        UPSTREAM_NVCC, TORCH_DEFAULTS, {m: n for m, n in settings.items() if n},
                        upstream_draws=task.format == "robust-kbench")
    if task.format == "kernelbench":
        return ModePlan(UPSTREAM, configs, timing_configs or [ALL_CONFIGS], trials or UPSTREAM_TRIALS, (),
                        TORCH_DEFAULTS, upstream_draws=True)
    raise ModeError(f"task {task.name!r} comes from neither robust-kbench nor KernelBench: the upstream mode has "
                    "nothing to reproduce there (drop --upstream / [eval] mode = \"upstream\")")
