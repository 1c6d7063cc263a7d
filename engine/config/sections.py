"""The config file's sections as typed dataclasses ([llm], [budget], [verify], [eval], [timing], [executor]) and the
`Config` that holds them; engine.config.load loads and merges the layers into these, engine.config.checks checks
them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.config.prices import _SNAPSHOT, DEFAULT_PRICES, FREE, LONG_PROMPT_PRICES, Price
from engine.errors import ConfigError

# The [timing] section: the timing loop's parameters, in a module of the standard library alone because the jailed
# runner reads them from its `job` messages before its jail is up (engine/timing_params.py)
from engine.timing_params import TimingParams

PROVIDERS = ("anthropic", "openai-compatible")
PROFILE_MODES = ("best", "all", "off")
# kbench's own evaluation, or robust-kbench's / KernelBench's as they run it (engine/pipeline/eval_mode.py)
EVAL_MODES = ("kbench", "upstream")
# fresh-seed correctness trials per config where neither [eval] trials nor --trials says: kbench's own, and
# robust-kbench's num_correct_trials (KernelBench's eval scripts' too) in the upstream mode
MODE_TRIALS = {"kbench": 2, "upstream": 5}

# How pydantic checks a section (each section dataclass carries it as `__pydantic_config__`): a key the
# dataclass lacks is an error, and a value must already have the field's type (strict: no "5" for an int, no
# `true` for a number), except that an int is taken for a float. A plain dict rather than pydantic's
# ConfigDict (a TypedDict, so the same thing), so that importing engine.config does not import pydantic:
# only load_config does.
_SECTION_RULES = {"extra": "forbid", "strict": True}


@dataclass(frozen=True)
class LLMConfig:
    __pydantic_config__ = _SECTION_RULES

    provider: str = "anthropic"            # anthropic (Messages API) | openai-compatible (vLLM, SGLang, Ollama, ...)
    model: str = "claude-opus-5-5"
    # The floor of max_tokens; a mutation of a long parent asks for more (the whole file comes back), up to
    # the model's own output limit. Calls that could exceed the SDK's non-streaming limit are streamed.
    max_tokens: int = 32000
    # auto: adaptive where the model has it, else a manual budget (older models); adaptive; enabled (a manual
    # budget where the model still takes one, else adaptive); disabled (where the model allows it, else adaptive)
    thinking: str = "auto"
    thinking_budget: int = 16000           # budget_tokens, only for models without adaptive thinking
    effort: str | None = "high"            # output_config.effort (lowered to the nearest level the model has)
    temperature: float | None = None       # only sent with thinking disabled (the API requires 1 otherwise)
    timeout_s: float = 600.0               # one attempt (streamed calls: between events)
    outage_minutes: float = 10.0           # keep retrying 429/529/5xx/timeouts this long, then pause the session
    max_retries: int | None = None         # optional cap on attempts per call; None: the outage window decides
    backoff_base_s: float = 2.0
    backoff_max_s: float = 60.0            # longest wait between attempts, retry-after included
    base_url: str | None = None            # anthropic: else ANTHROPIC_BASE_URL; openai-compatible: required
    api_key_env: str | None = None         # the variable holding the key (default ANTHROPIC_API_KEY / OPENAI_API_KEY;
                                           # "" for a local endpoint that needs none)
    concurrency: int = 2                   # proposals in flight at once (so the GPU has the next one ready)
    models_api: bool = True                # ask the Models API for the model's capabilities (cached a day)
    force_tool: bool = True                # openai-compatible: name the tool in tool_choice
    # openai-compatible: the model's context length in tokens, where the server's /v1/models does not say it
    # (Ollama) or says more than it serves; max_tokens is fitted to it. None: ask the server.
    context_tokens: int | None = None
    stream: bool | None = None             # openai-compatible: stream every call (or none); None: long ones
    prompts_dir: str | None = None         # templates here override the built-in ones, file by file
    # What an answer may be written in: "cuda" (kernel.cu, with or without binding.cpp) and "triton" (a Triton
    # kernel.py defining the task's launcher, engine/tasks/glue/triton.py). The prompt offers each, and the
    # answer's check takes each, only where it is listed.
    languages: list[str] = field(default_factory=lambda: ["cuda"])
    prices: dict[str, Price] = field(default_factory=lambda: dict(DEFAULT_PRICES))

    def price_for(self, model: str, prompt_tokens: int = 0) -> Price:
        """Exact match on the model id (a dated snapshot also matches its undated id), else "*". An
        openai-compatible endpoint costs nothing unless [llm.prices] says so (a local model is free).
        `prompt_tokens`: the request's whole prompt, for models billed higher above a prompt length."""
        for key in (model, _SNAPSHOT.sub("", model)):
            if key in self.prices:
                price = self.prices[key]
                above, long = LONG_PROMPT_PRICES.get(key, (0, None))
                if long is not None and prompt_tokens > above and price == DEFAULT_PRICES.get(key):
                    return long
                return price
        if self.provider != "anthropic":
            configured_star = self.prices.get("*")
            return configured_star if configured_star is not None and configured_star != DEFAULT_PRICES["*"] else FREE
        return self.prices.get("*", DEFAULT_PRICES["*"])

    def key_env(self) -> str:
        if self.api_key_env is not None:
            return self.api_key_env
        return "ANTHROPIC_API_KEY" if self.provider == "anthropic" else "OPENAI_API_KEY"


@dataclass(frozen=True)
class BudgetConfig:
    __pydantic_config__ = _SECTION_RULES

    usd: float | None = 10.0  # per session; None = no limit


@dataclass(frozen=True)
class VerifyConfig:
    __pydantic_config__ = _SECTION_RULES

    enabled: bool = True
    min_confidence: float = 0.7  # a verifier's "fail" at or above this confidence fails the candidate
    model: str | None = None  # a cheaper model for the verifiers; None = [llm] model
    # disabled: no thinking where the model allows it (then the verdict tool is forced), else adaptive
    thinking: str = "disabled"
    effort: str | None = "low"
    max_tokens: int = 8000


# [eval] gpu_keep's default: on an 80 GB GPU, 10 GB of prepared variants before a config's are parked
GPU_KEEP = 0.125


@dataclass(frozen=True)
class EvalConfig:
    """How candidates are evaluated in sessions (evolve, the app, reevaluate); flags override per run."""

    __pydantic_config__ = _SECTION_RULES

    trials: int | None = None             # fresh-seed correctness trials per config; unset: the mode's (2, upstream 5)
    timeout_s: float = 600.0              # one evaluation's sandbox is killed after this long
    compile_baseline: bool = True         # also time torch.compile (slow to warm up: off for quick sessions)
    # Time only these configs (correctness still covers all); ["all"]: every config; None: the task's default,
    # its `bench` config and those tagged `timed` (every config where it has neither; engine.tasks.model)
    timing_configs: list[str] | None = None
    # The profile stage (ncu + torch profiler, seconds to a minute per candidate): "best" profiles a candidate
    # when it becomes the session's new best (and on demand: `kbench profile`, the app's re-evaluate), "all"
    # every candidate that passes, "off" none. The older booleans still read: true is "all", false "off".
    profile: str = "best"
    # Vendor libraries and ATen: "pure" (not allowed) or "engineering" (allowed, tagged); None: the task's
    # `library_policy`, else "pure" (engine.integrity.policy; README "Library policy").
    library_policy: str | None = None
    # "kbench" (the default: every config of the direction, fresh seeds, TF32 off) or "upstream": robust-kbench's
    # and KernelBench's own settings, trials, flags and precision, for numbers comparable with theirs
    mode: str = "kbench"
    # The share of the GPU's memory the judge may keep prepared inputs and references in; a config whose variants
    # would take more is parked in host memory between uses (less GPU memory, a slower check). 0: always park.
    gpu_keep: float = GPU_KEEP
    # `kbench eval` leaves a judge up (its runner jailed, CUDA ready, no candidate) for this many seconds, for the
    # next `kbench eval` on the same GPU to claim instead of starting one (engine/pipeline/kept_judge.py); 0: none
    keep_judge_s: float = 300.0


@dataclass(frozen=True)
class ExecutorConfig:
    """Where evaluations run: this machine's worker processes, or a Ray cluster (`pip install kbench[ray]`)."""

    __pydantic_config__ = _SECTION_RULES

    kind: str = "local"                   # local | ray
    gpus: str | None = None               # local: GPU indices "0,1" (default: every visible GPU)
    build_workers: int | None = None      # local: compile processes (default: CPU cores - GPUs)
    ray_address: str | None = None        # ray: "auto", "ray://host:10001", "host:6379"; None starts a local one
    retries: int = 2                      # ray: re-runs of an evaluation whose worker or node was lost
    compile_on_cluster: bool = True       # ray: compile in CPU tasks of the cluster (else on the GPU task's node)
    build_cpus: float = 1.0               # ray: CPUs one compile task requests
    ship_code: bool = True                # ray: send this checkout's engine/ to the workers (runtime_env)


@dataclass(frozen=True)
class Config:
    llm: LLMConfig = field(default_factory=LLMConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    timing: TimingParams = field(default_factory=TimingParams)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    keys: dict[str, str] = field(default_factory=dict)  # TUI binding id -> key
    extra: dict[str, Any] = field(default_factory=dict)  # sections owned by other modules, raw
    sources: tuple[str, ...] = ()  # the files and layers that were applied, in order


_SECTIONS: dict[str, type] = {"llm": LLMConfig, "budget": BudgetConfig, "verify": VerifyConfig,
                              "eval": EvalConfig, "timing": TimingParams, "executor": ExecutorConfig}


def profile_mode(value: Any, where: str = "[eval] profile") -> str:
    """"best", "all" or "off"; the older booleans of `[eval] profile` map to "all" (true) and "off" (false)."""
    if isinstance(value, bool):
        return "all" if value else "off"
    if isinstance(value, str) and value.strip().lower() in PROFILE_MODES:
        return value.strip().lower()
    raise ConfigError(f"{where}: expected \"best\" (profile each new best), \"all\" (every candidate that passes) "
                      f"or \"off\" (the older true / false mean \"all\" / \"off\"), got {value!r}.")


