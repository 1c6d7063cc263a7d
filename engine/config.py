"""Typed configuration, layered: defaults <- user file <- workspace file <- environment <- flags.

Files are TOML. The user file is `$XDG_CONFIG_HOME/kbench/config.toml` (default `~/.config/...`), the
workspace file `<workspace>/.kbench/config.toml`. Known sections become typed dataclasses and are checked
key by key (a typo names its file); sections this module does not know are kept raw in `Config.extra`
so other parts (harness, TUI) can read theirs without touching this loader.

API keys are never read from files: `ANTHROPIC_API_KEY` (or the variable `[llm] api_key_env` names) stays in
the environment (see engine.llm.availability).

The LLM price table is in engine.config_prices and the KBENCH_* environment registry in engine.config_env;
this module re-exports both, so callers import from engine.config alone.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

# Re-exported: the price table and the environment registry live in their own modules, and ConfigError in
# engine.errors (below both); `from engine.config import ...` stays the one import path for callers.
from engine.config_env import (  # noqa: F401
    ENV_VARS,
    SECRETS_FD_ENV,
    Env,
    EnvVar,
    cache_dir,
    cache_root,
    env_flag,
    env_float,
    env_int,
    env_raw,
    take_secrets_fd,
    task_dirs,
    workspace_dir,
)
from engine.config_prices import _SNAPSHOT, DEFAULT_PRICES, FREE, Price, _prices
from engine.errors import ConfigError

PROVIDERS = ("anthropic", "openai-compatible")
PROFILE_MODES = ("best", "all", "off")

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


@dataclass(frozen=True)
class EvalConfig:
    """How candidates are evaluated in sessions (evolve, the app, reevaluate); flags override per run."""

    __pydantic_config__ = _SECTION_RULES

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
        # None: an argparse default, ignored; a tuple from a Python caller reads as the list TOML would give
        layer = _checked(_undot({k: list(v) if isinstance(v, tuple) else v for k, v in flags.items()
                                 if v is not None}), "flags")
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
    """Check a layer's known sections now, so an error names the file (or "flags") it came from."""
    problems: list[str] = []
    for name in _SECTIONS:
        if name in layer:
            problems += _section(name, layer[name])[1]
    if "keys" in layer:
        problems += _keys(layer["keys"])[1]
    if problems:
        raise ConfigError(_listed(origin, problems))
    return layer


def _build(merged: dict[str, Any], sources: tuple[str, ...]) -> Config:
    where = ", ".join(sources) if sources else "the defaults"
    kwargs: dict[str, Any] = {}
    problems: list[str] = []
    for name in _SECTIONS:
        kwargs[name], found = _section(name, merged.get(name) or {}, merged=True)
        problems += found
    kwargs["keys"], found = _keys(merged.get("keys") or {})
    problems += found
    if problems:  # each layer was checked on its own already; kept so that nothing unchecked gets through
        raise ConfigError(f"{_listed('config', problems)} (config from: {where})")
    kwargs["extra"] = {k: v for k, v in merged.items() if k not in _SECTIONS and k != "keys"}
    cfg = Config(**kwargs, sources=sources)
    try:
        _validate(cfg)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (config from: {where})") from None
    return cfg


def _listed(origin: str, problems: list[str]) -> str:
    if len(problems) == 1:
        return f"{origin}: {problems[0]}."
    return f"{origin}: {len(problems)} problems: " + "; ".join(problems) + "."


def profile_mode(value: Any, where: str = "[eval] profile") -> str:
    """"best", "all" or "off"; the older booleans of `[eval] profile` map to "all" (true) and "off" (false)."""
    if isinstance(value, bool):
        return "all" if value else "off"
    if isinstance(value, str) and value.strip().lower() in PROFILE_MODES:
        return value.strip().lower()
    raise ConfigError(f"{where}: expected \"best\" (profile each new best), \"all\" (every candidate that passes) "
                      f"or \"off\" (the older true / false mean \"all\" / \"off\"), got {value!r}.")


# Keys read by hand before pydantic sees the section, because what they accept is not a type: a price table
# derives the prices it leaves out from `input` (engine.config_prices), and `profile` still takes the older
# booleans and any case. Each says what it expects in its own words.
_READERS: dict[tuple[str, str], Any] = {("llm", "prices"): lambda raw: _prices(raw, "[llm]"),
                                        ("eval", "profile"): lambda raw: profile_mode(raw, "[eval] profile")}


def _section(name: str, raw: Any, *, merged: bool = False) -> tuple[Any, list[str]]:
    """[name] as its dataclass, keys `raw` leaves out at their defaults, and the problems found (one line each,
    naming `[name] key`: what was expected and what was found); the dataclass is None where there are some.
    `merged`: the layers merged, so a configured price table is added to the default one."""
    if not isinstance(raw, Mapping):
        return None, [f"[{name}] must be a table, got {raw!r}"]
    cls = _SECTIONS[name]
    if not raw:
        return cls(), []   # the defaults: no need to import pydantic (~0.2 s) for a section nobody configured
    from pydantic import ValidationError

    data = dict(raw)
    problems: list[str] = []
    for (section, key), read in _READERS.items():
        if section == name and key in data:
            try:
                data[key] = read(data[key])
            except ConfigError as exc:
                problems.append(str(exc).rstrip("."))
                del data[key]
    if merged and name == "llm" and "prices" in data:
        # Configured prices add to (and override) the defaults rather than replacing the whole table.
        data["prices"] = {**DEFAULT_PRICES, **data["prices"]}
    try:
        value = _strict(cls, data)
    except ValidationError as exc:
        return None, problems + _explained(name, cls, data, exc)
    return (None if problems else value), problems


def _keys(raw: Any) -> tuple[dict[str, str], list[str]]:
    if isinstance(raw, Mapping) and not raw:
        return {}, []
    from pydantic import ValidationError

    try:
        return dict(_adapter(dict[str, str]).validate_python(raw, strict=True)), []
    except ValidationError as exc:
        if not isinstance(raw, Mapping):
            return {}, [f"[keys] must be a table of binding id = key name, got {raw!r}"]
        bad = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]})
        return {}, [f"[keys] {k}: expected a key name (str), got {raw[k]!r}" for k in bad]


def _explained(name: str, cls: type, data: dict[str, Any], exc: Any) -> list[str]:
    """pydantic's errors for section [name] as lines naming the key, the field's type and the value found. The
    type is the field's annotation as written, less `| None`: None is what leaving the key out gives."""
    types = {f.name: str(f.type).replace(" | None", "") for f in dataclasses.fields(cls)}
    unknown: list[str] = []
    lines: dict[str, str] = {}
    for err in exc.errors():
        loc = err["loc"]
        if err["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
            unknown.append(str(loc[0]))
        elif loc and loc[0] in types:
            key = str(loc[0])
            inner = " ".join(f"item {p}" if isinstance(p, int) else str(p) for p in loc[1:])
            detail = f" ({inner}: {err['msg'][0].lower()}{err['msg'][1:]})" if inner else ""
            lines.setdefault(key, f"[{name}] {key}: expected {types[key]}, got {data.get(key)!r}{detail}")
        else:
            lines.setdefault(str(loc), f"[{name}]: {err['msg']}")
    if unknown:
        close = {k: m[0] for k in unknown if (m := difflib.get_close_matches(k, types, n=1))}
        hint = (f" (did you mean {next(iter(close.values()))}?)" if len(unknown) == 1 and close else
                f" (did you mean {', '.join(f'{m} for {k}' for k, m in close.items())}?)" if close else "")
        lines["<unknown>"] = f"[{name}] unknown key(s) {', '.join(unknown)}{hint}; known: {', '.join(sorted(types))}"
    return list(lines.values())


@functools.cache
def _adapter(tp: Any) -> Any:
    from pydantic import TypeAdapter   # here, not at the top: only loading a config pays for importing pydantic
    return TypeAdapter(tp)


def _strict(cls: type, data: dict[str, Any]) -> Any:
    """`cls(**data)`, checked by pydantic under the class's `__pydantic_config__`. In strict mode pydantic takes a
    dataclass itself only as an instance, so the dict goes through the dataclass's init path (`self_instance`),
    as pydantic's own dataclasses do for their __init__ arguments."""
    obj = object.__new__(cls)
    _adapter(cls).validator.validate_python(data, self_instance=obj)
    return obj


def _validate(cfg: Config) -> None:
    # The rules on values rather than types stay here, run once on the merged config, instead of becoming
    # pydantic validators on the sections: several span keys that different layers may set (thinking_budget
    # below max_tokens, base_url required by provider), and each message can then name every layer it came from.
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
