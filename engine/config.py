"""Typed configuration, layered: defaults <- user file <- workspace file <- environment <- flags.

Files are TOML. The user file is `$XDG_CONFIG_HOME/kbench/config.toml` (default `~/.config/...`), the
workspace file `<workspace>/.kbench/config.toml`. Known sections become typed dataclasses and are checked
key by key (a typo names its file); sections this module does not know are kept raw in `Config.extra`
so other parts (harness, TUI) can read theirs without touching this loader.

API keys are never read from files: `ANTHROPIC_API_KEY` (or the variable `[llm] api_key_env` names) stays in
the environment (see engine.llm.availability).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from engine.errors import KbenchError


class ConfigError(KbenchError):
    """A config file or flag has an unknown key or a value of the wrong type."""


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cache_write: float  # 5-minute cache writes
    cache_read: float


FREE = Price(0.0, 0.0, 0.0, 0.0)

# Anthropic list prices (USD per million tokens: input, output, 5-minute cache write, cache hit), read from
# the pricing and model pages on 2026-11-23 (docs/formats.md, "LLM: what the API documents"). Matched by
# exact model id; a dated snapshot id (claude-haiku-4-5-20251001) matches its undated entry, nothing else
# does, so a model this table does not know costs the "*" entry: deliberately the most expensive tier, so a
# budget stops early rather than late. Override or add any model with [llm.prices."<model>"].
DEFAULT_PRICES: dict[str, Price] = {
    "claude-fable-5-2": Price(8.0, 40.0, 10.0, 0.20),
    "claude-mythos-5-2": Price(8.0, 40.0, 10.0, 0.20),
    "claude-fable-5-1": Price(10.0, 50.0, 12.50, 0.25),
    "claude-mythos-5-1": Price(10.0, 50.0, 12.50, 0.25),
    "claude-fable-5": Price(10.0, 50.0, 12.50, 1.00),
    "claude-mythos-5": Price(10.0, 50.0, 12.50, 1.00),
    "claude-opus-5-5": Price(4.0, 20.0, 5.0, 0.20),
    "claude-opus-5": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-8": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-7": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-6": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-5": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-1": Price(15.0, 75.0, 18.75, 1.50),
    "claude-opus-4": Price(15.0, 75.0, 18.75, 1.50),
    "claude-sonnet-5-5": Price(2.0, 10.0, 2.50, 0.10),
    "claude-sonnet-5": Price(2.0, 10.0, 2.50, 0.20),
    "claude-sonnet-4-6": Price(3.0, 15.0, 3.75, 0.30),
    "claude-sonnet-4-5": Price(3.0, 15.0, 3.75, 0.30),
    "claude-sonnet-4": Price(3.0, 15.0, 3.75, 0.30),
    "claude-haiku-5-5": Price(0.10, 0.50, 0.125, 0.01),   # prompts up to 100k tokens (kbench's are smaller)
    "claude-haiku-4-5": Price(1.0, 5.0, 1.25, 0.10),
    "*": Price(15.0, 75.0, 18.75, 1.50),
}

PROVIDERS = ("anthropic", "openai-compatible")
PROFILE_MODES = ("best", "all", "off")
_SNAPSHOT = re.compile(r"-(\d{8})$")


@dataclass(frozen=True)
class LLMConfig:
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
    prompts_dir: str | None = None         # templates here override the built-in ones, file by file
    prices: dict[str, Price] = field(default_factory=lambda: dict(DEFAULT_PRICES))

    def price_for(self, model: str) -> Price:
        """Exact match on the model id (a dated snapshot also matches its undated id), else "*". An
        openai-compatible endpoint costs nothing unless [llm.prices] says so (a local model is free)."""
        for key in (model, _SNAPSHOT.sub("", model)):
            if key in self.prices:
                return self.prices[key]
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
    usd: float | None = 10.0  # per session; None = no limit


@dataclass(frozen=True)
class VerifyConfig:
    enabled: bool = True
    min_confidence: float = 0.7  # a verifier's "fail" at or above this confidence fails the candidate
    model: str | None = None  # a cheaper model for the verifiers; None = [llm] model
    # disabled: no thinking where the model allows it (then the verdict tool is forced), else adaptive
    thinking: str = "disabled"
    effort: str | None = "low"
    max_tokens: int = 8000


@dataclass(frozen=True)
class EvalConfig:
    """How candidates are evaluated in sessions (evolve, the app, reevaluate); flags override per run."""

    trials: int = 2                       # fresh-seed correctness trials per config
    timeout_s: float = 600.0              # one evaluation's sandbox is killed after this long
    compile_baseline: bool = True         # also time torch.compile (slow to warm up: off for quick sessions)
    timing_configs: list[str] | None = None  # time only these configs (correctness still covers all)
    # The profile stage (ncu + torch profiler, seconds to a minute per candidate): "best" profiles a candidate
    # when it becomes the session's new best (and on demand: `kbench profile`, the app's re-evaluate), "all"
    # every candidate that passes, "off" none. The older booleans still read: true is "all", false "off".
    profile: str = "best"
    # Vendor libraries and ATen: "pure" (not allowed) or "engineering" (allowed, tagged); None: the task's
    # `library_policy`, else "pure" (engine.integrity.policy; README "Library policy").
    library_policy: str | None = None


@dataclass(frozen=True)
class ExecutorConfig:
    """Where evaluations run: this machine's worker processes, or a Ray cluster (`pip install kbench[ray]`)."""

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
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    keys: dict[str, str] = field(default_factory=dict)  # TUI binding id -> key
    extra: dict[str, Any] = field(default_factory=dict)  # sections owned by other modules, raw
    sources: tuple[str, ...] = ()  # the files and layers that were applied, in order


_SECTIONS: dict[str, type] = {"llm": LLMConfig, "budget": BudgetConfig, "verify": VerifyConfig,
                              "eval": EvalConfig, "executor": ExecutorConfig}


def user_config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "kbench" / "config.toml"


def workspace_config_path(workspace: str | Path) -> Path:
    return Path(workspace) / ".kbench" / "config.toml"


def load_config(workspace: str | Path | None = None, flags: Mapping[str, Any] | None = None, *,
                env: Mapping[str, str] | None = None, user_file: str | Path | None = None) -> Config:
    """Merge the layers and return a typed Config.

    `flags` may be nested ({"llm": {"model": ...}}) or dotted ({"llm.model": ...}); None values are
    ignored so argparse defaults can be passed straight through.
    """
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    sources: list[str] = []
    for path in (Path(user_file) if user_file else user_config_path(env),
                 workspace_config_path(workspace) if workspace is not None else None):
        if path is not None and path.is_file():
            _merge(merged, _checked(_read_toml(path), str(path)))
            sources.append(str(path))
    if env.get("ANTHROPIC_BASE_URL"):
        _merge(merged, {"llm": {"base_url": env["ANTHROPIC_BASE_URL"]}})
        sources.append("env:ANTHROPIC_BASE_URL")
    if flags:
        layer = _checked(_undot({k: v for k, v in flags.items() if v is not None}), "flags")
        if layer:
            _merge(merged, layer)
            sources.append("flags")
    return _build(merged, tuple(sources))


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it as TOML ({exc}).") from None


def _undot(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        layer: Any = value
        for p in reversed(parts):
            layer = {p: layer}  # only the flag's own key is dotted; model names in values may hold dots
        _merge(out, layer)
    return out


def _merge(into: dict[str, Any], layer: Mapping[str, Any]) -> None:
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(dict(value)) if isinstance(value, Mapping) else value


def _checked(layer: dict[str, Any], origin: str) -> dict[str, Any]:
    """Check a layer's known sections now, so an error names the file it came from."""
    for name, cls in _SECTIONS.items():
        if name in layer:
            section = layer[name]
            if not isinstance(section, Mapping):
                raise ConfigError(f"{origin}: [{name}] must be a table.")
            _convert(cls, dict(section), f"{origin}: [{name}]", partial=True)
    if "keys" in layer:
        keys = layer["keys"]
        if not isinstance(keys, Mapping) or not all(isinstance(v, str) for v in keys.values()):
            raise ConfigError(f"{origin}: [keys] must map binding ids to key names (strings).")
    return layer


def _build(merged: dict[str, Any], sources: tuple[str, ...]) -> Config:
    kwargs: dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        kwargs[name] = _convert(cls, dict(merged.get(name) or {}), f"[{name}]", partial=False)
    kwargs["keys"] = dict(merged.get("keys") or {})
    kwargs["extra"] = {k: v for k, v in merged.items() if k not in _SECTIONS and k != "keys"}
    cfg = Config(**kwargs, sources=sources)
    try:
        _validate(cfg)
    except ConfigError as exc:
        where = ", ".join(sources) if sources else "the defaults"
        raise ConfigError(f"{exc} (config from: {where})") from None
    return cfg


def _convert(cls: type, data: dict[str, Any], where: str, *, partial: bool) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}.")
    values: dict[str, Any] = {}
    for key, raw in data.items():
        if cls is LLMConfig and key == "prices":
            values[key] = _prices(raw, where)
        elif cls is EvalConfig and key == "profile":
            values[key] = profile_mode(raw, f"{where} profile")
        else:
            values[key] = _coerce(raw, hints[key], f"{where} {key}")
    if partial:
        return values
    if cls is LLMConfig and "prices" in values:
        # Configured prices add to (and override) the defaults rather than replacing the whole table.
        values["prices"] = {**DEFAULT_PRICES, **values["prices"]}
    return cls(**values)


def profile_mode(value: Any, where: str = "[eval] profile") -> str:
    """"best", "all" or "off"; the older booleans of `[eval] profile` map to "all" (true) and "off" (false)."""
    if isinstance(value, bool):
        return "all" if value else "off"
    if isinstance(value, str) and value.strip().lower() in PROFILE_MODES:
        return value.strip().lower()
    raise ConfigError(f"{where}: expected \"best\" (profile each new best), \"all\" (every candidate that passes) "
                      f"or \"off\" (the older true / false mean \"all\" / \"off\"), got {value!r}.")


def _prices(raw: Any, where: str) -> dict[str, Price]:
    if isinstance(raw, dict) and all(isinstance(v, Price) for v in raw.values()):
        return dict(raw)
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} prices: expected tables [llm.prices.\"<model>\"].")
    out: dict[str, Price] = {}
    for model, p in raw.items():
        if isinstance(p, Price):
            out[model] = p
            continue
        if not isinstance(p, Mapping):
            raise ConfigError(f"{where} prices.{model}: expected a table with input, output, cache_write, "
                              "cache_read (USD per million tokens).")
        fields_ = {f.name for f in dataclasses.fields(Price)}
        if set(p) - fields_:
            raise ConfigError(f"{where} prices.{model}: unknown key(s) {', '.join(sorted(set(p) - fields_))}.")
        base = p.get("input")
        if not isinstance(base, (int, float)) or isinstance(base, bool):
            raise ConfigError(f"{where} prices.{model}: `input` (USD per million tokens) is required.")
        # Cache prices default to Anthropic's multipliers of the input price (1.25x write, 0.1x read).
        defaults = {"output": base * 5, "cache_write": base * 1.25, "cache_read": base * 0.1}
        vals = {k: p.get(k, defaults.get(k)) for k in fields_}
        for k, v in vals.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"{where} prices.{model}.{k}: expected a non-negative number, got {v!r}.")
        out[model] = Price(**{k: float(v) for k, v in vals.items()})
    return out


def _coerce(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for opt in options:
            if opt is type(None):
                continue
            try:
                return _coerce(value, opt, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: expected {_describe(hint)}, got {value!r}.")
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif origin is dict:
        if isinstance(value, Mapping):
            return dict(value)
    elif origin is list:
        (item,) = typing.get_args(hint)
        if isinstance(value, (list, tuple)):
            return [_coerce(v, item, where) for v in value]
    else:
        return value
    raise ConfigError(f"{where}: expected {_describe(hint)}, got {value!r}.")


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) is list:
        return f"a list of {_describe(typing.get_args(hint)[0])}"
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if args:
        return " or ".join(_describe(a) for a in args)
    return getattr(hint, "__name__", str(hint))


def _validate(cfg: Config) -> None:
    llm = cfg.llm
    thinking = ("auto", "enabled", "adaptive", "disabled")
    efforts = ("low", "medium", "high", "xhigh", "max")
    if llm.provider not in PROVIDERS:
        raise ConfigError(f"[llm] provider: expected {' or '.join(PROVIDERS)}, got {llm.provider!r}.")
    if llm.provider == "openai-compatible" and not llm.base_url:
        raise ConfigError("[llm] base_url is required with provider = \"openai-compatible\" "
                          "(e.g. \"http://localhost:8000/v1\" for vLLM).")
    if llm.thinking not in thinking:
        raise ConfigError(f"[llm] thinking: expected auto, adaptive, enabled or disabled, got {llm.thinking!r}.")
    if llm.max_tokens < 1:
        raise ConfigError("[llm] max_tokens must be positive.")
    if llm.thinking in ("auto", "enabled") and not 1024 <= llm.thinking_budget < llm.max_tokens:
        raise ConfigError(f"[llm] thinking_budget must be at least 1024 and below max_tokens ({llm.max_tokens}); "
                          f"got {llm.thinking_budget}. It is used only by models without adaptive thinking.")
    for where, effort in (("[llm]", llm.effort), ("[verify]", cfg.verify.effort)):
        if effort is not None and effort not in efforts:
            raise ConfigError(f"{where} effort: expected low, medium, high, xhigh or max, got {effort!r}.")
    if llm.temperature is not None and not 0.0 <= llm.temperature <= 1.0:
        raise ConfigError(f"[llm] temperature must be between 0 and 1, got {llm.temperature}.")
    if (llm.timeout_s <= 0 or (llm.max_retries is not None and llm.max_retries < 0) or llm.backoff_base_s < 0
            or llm.backoff_max_s < 0 or llm.outage_minutes < 0):
        raise ConfigError("[llm] timeout_s must be positive; max_retries, outage_minutes and backoff times "
                          "non-negative.")
    if llm.concurrency < 1:
        raise ConfigError(f"[llm] concurrency must be at least 1, got {llm.concurrency}.")
    if cfg.budget.usd is not None and cfg.budget.usd < 0:
        raise ConfigError(f"[budget] usd must be non-negative, got {cfg.budget.usd}.")
    if cfg.verify.thinking not in thinking:
        raise ConfigError(f"[verify] thinking: expected auto, adaptive, enabled or disabled, "
                          f"got {cfg.verify.thinking!r}.")
    if cfg.verify.max_tokens < 1:
        raise ConfigError("[verify] max_tokens must be positive.")
    if not 0.0 <= cfg.verify.min_confidence <= 1.0:
        raise ConfigError(f"[verify] min_confidence must be between 0 and 1, got {cfg.verify.min_confidence}.")
    if cfg.eval.trials < 1 or cfg.eval.timeout_s <= 0:
        raise ConfigError("[eval] trials must be at least 1 and timeout_s positive.")
    if cfg.eval.library_policy is not None and cfg.eval.library_policy not in ("pure", "engineering"):
        raise ConfigError(f"[eval] library_policy: expected pure or engineering, got {cfg.eval.library_policy!r}.")
    ex = cfg.executor
    if ex.kind not in ("local", "ray"):
        raise ConfigError(f"[executor] kind: expected local or ray, got {ex.kind!r}.")
    if ex.retries < 0 or ex.build_cpus <= 0 or (ex.build_workers is not None and ex.build_workers < 1):
        raise ConfigError("[executor] retries must be non-negative, build_cpus positive, build_workers at least 1.")
    if ex.gpus is not None and not all(p.strip().isdigit() for p in ex.gpus.split(",")):
        raise ConfigError(f"[executor] gpus: expected GPU indices like \"0,1\", got {ex.gpus!r}.")


# -- environment variables --------------------------------------------------------------------------------
# Every KBENCH_* variable kbench reads is registered here with what it does, and read only through the
# accessors below: a misspelt name is a KeyError, a value that does not parse a ConfigError naming the
# variable. README.md ("Environment variables") lists the same set; tests/test_config_env.py keeps the
# registry, the README and the readers together. Unset or empty means the default.

Env = Mapping[str, str] | None       # None: os.environ (a mapping lets tests and children pass their own)


@dataclass(frozen=True)
class EnvVar:
    name: str
    default: str                     # as the environment would hold it; "" for none
    doc: str
    test_only: bool = False          # a hook for kbench's own tests and benchmarks, not a setting


ENV_VARS: dict[str, EnvVar] = {v.name: v for v in (
    EnvVar("KBENCH_WORKSPACE", "", "the workspace repository when `--workspace` is not given (else ./workspace)"),
    EnvVar("KBENCH_TASKS", "", "folders of your own tasks, separated by `:` like PATH; listed after the built-in ones"),
    EnvVar("KBENCH_CACHE", "", "builds, object files, evaluation records, roofline peaks and the Models API "
                               "catalogue (else $XDG_CACHE_HOME/kbench, else ~/.cache/kbench)"),
    EnvVar("KBENCH_CLAIM_WAIT_S", "3", "seconds a session held by another writer is retried before refusing"),
    EnvVar("KBENCH_GIT_LOCK_WAIT_MS", "3000", "milliseconds a git `*.lock` file of another process is waited for "
                                              "before a workspace write gives up"),
    EnvVar("KBENCH_WORKSPACE_GC_EVERY", "200", "run `git gc --auto` in the workspace every this many commits; 0: never"),
    EnvVar("KBENCH_SECRETS_FD", "", "internal: the pipe through which kbench hands the API keys to itself when it "
                                    "re-executes without them in its environment (engine.secrets)"),
    EnvVar("KBENCH_CRASHPOINT", "", "`<point>[:<n>]` or `any:<n>`: the process kills itself at that workspace write "
                                    "point (crash-safety tests)", test_only=True),
    EnvVar("KBENCH_CRASHED_DURING_REFS", "", "set by the `during-refs` crash point for the git child it starts, so a "
                                             "test's git hook can slow that child down", test_only=True),
    EnvVar("KBENCH_FAKE_EVAL_DELAY", "0", "`kbench evolve --fake-evaluator`: seconds each fake evaluation takes",
           test_only=True),
    EnvVar("KBENCH_FAKE_BUILD_S", "", "seconds the fake compile stage sleeps (default: its caller's)", test_only=True),
    EnvVar("KBENCH_FAKE_GPU_S", "", "seconds the fake GPU stage sleeps (default: its caller's)", test_only=True),
    EnvVar("KBENCH_FAKE_NO_GPU", "", "set: the fake evaluator reports that no GPU is visible", test_only=True),
    EnvVar("KBENCH_FAKE_EVAL_HOLD_AFTER", "0", "the fake evaluator holds every evaluation after the first N until "
                                               "it is closed; 0: never", test_only=True),
    EnvVar("KBENCH_TUI_FAKE_EVALUATOR", "", "set: the app evaluates with the fake evaluator (`kbench "
                                            "--fake-evaluator` sets it)", test_only=True),
    EnvVar("KBENCH_TUI_FAKE_DELAY", "0.3", "seconds each of the app's fake evaluations takes", test_only=True),
    EnvVar("KBENCH_UPDATE_SNAPSHOTS", "", "set: tests/test_tui_snapshots.py rewrites the snapshots it compares with",
           test_only=True),
    EnvVar("KBENCH_TEST_SINGLE_CU", "", "set: run the test that compiles a single-file candidate with nvcc (minutes "
                                        "on a small machine)", test_only=True),
    EnvVar("KBENCH_INTEGRITY_TIMEOUT", "240", "seconds each case of tests/test_gpu_integrity.py may take",
           test_only=True),
)}

SECRETS_FD_ENV = "KBENCH_SECRETS_FD"


def env_raw(name: str, env: Env = None) -> str:
    """The variable's value, else its registered default ("" for none). Unregistered names are a KeyError."""
    var = ENV_VARS[name]
    return (os.environ if env is None else env).get(name) or var.default


def env_flag(name: str, env: Env = None) -> bool:
    """Set to anything non-empty (as the hooks have always read it: "0" is set too)."""
    return bool(env_raw(name, env))


def env_int(name: str, env: Env = None, default: int | None = None) -> int:
    return int(_number(name, int, env, default))


def env_float(name: str, env: Env = None, default: float | None = None) -> float:
    """`default` stands in for the registered one where the caller has its own (the fake stages' sleeps)."""
    return float(_number(name, float, env, default))


def _number(name: str, kind: type[int] | type[float], env: Env, default: float | None) -> float:
    var = ENV_VARS[name]
    raw = (os.environ if env is None else env).get(name) or ""
    if not raw:
        return default if default is not None else kind(var.default or 0)
    try:
        return kind(raw)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ConfigError(f"${name}: expected {what}, got {raw!r} ({var.doc}).") from None


def workspace_dir(env: Env = None) -> Path | None:
    """$KBENCH_WORKSPACE, None when unset (the caller's fallback is ./workspace)."""
    raw = env_raw("KBENCH_WORKSPACE", env)
    return Path(raw).expanduser() if raw else None


def task_dirs(raw: str | None = None, env: Env = None) -> list[Path]:
    """$KBENCH_TASKS split like PATH (`raw` stands in for the variable)."""
    raw = env_raw("KBENCH_TASKS", env) if raw is None else raw
    return [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]


def cache_dir(env: Env = None) -> Path | None:
    """$KBENCH_CACHE as given; None when unset (each reader picks its fallback: see cache_root)."""
    raw = env_raw("KBENCH_CACHE", env)
    return Path(raw) if raw else None


def cache_root(env: Env = None) -> Path:
    """$KBENCH_CACHE, else $XDG_CACHE_HOME/kbench, else ~/.cache/kbench."""
    e = os.environ if env is None else env
    return cache_dir(env) or Path(e.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "kbench"


def take_secrets_fd() -> int | None:
    """The key pipe's descriptor, removed from os.environ so no child inherits it; None when absent."""
    raw = os.environ.pop(SECRETS_FD_ENV, None)
    return int(raw) if raw is not None else None
