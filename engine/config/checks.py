"""Checking config layers: each known section through pydantic (strict, unknown keys refused, every problem
named by `[section] key`), the `[keys]` table, and the rules on values that span keys (`validate`), run once
on the merged config. engine.config calls these.

Lazy imports: pydantic (~0.2 s), only when a section is configured: `import engine.config` must not load it
(the task loader imports engine.config, and the jailed runner and profile child, where pydantic is out of reach,
load tasks).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from typing import Any, Iterable, Mapping

from engine.config.prices import DEFAULT_PRICES, _prices
from engine.config.sections import _SECTIONS, EVAL_MODES, PROVIDERS, Config, profile_mode
from engine.errors import ConfigError

# Keys read by hand before pydantic sees the section, because what they accept is not a type: a price table
# derives the prices it leaves out from `input` (engine.config.prices), and `profile` still takes the older
# booleans and any case. Each says what it expects in its own words.
_READERS: dict[tuple[str, str], Any] = {("llm", "prices"): lambda raw: _prices(raw, "[llm]"),
                                        ("eval", "profile"): lambda raw: profile_mode(raw, "[eval] profile")}


def section(name: str, raw: Any, *, merged: bool = False) -> tuple[Any, list[str]]:
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
    for (where, key), read in _READERS.items():
        if where == name and key in data:
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


def keys(raw: Any) -> tuple[dict[str, str], list[str]]:
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
    from pydantic import TypeAdapter
    return TypeAdapter(tp)


def _strict(cls: type, data: dict[str, Any]) -> Any:
    """`cls(**data)`, checked by pydantic under the class's `__pydantic_config__`. In strict mode pydantic takes a
    dataclass itself only as an instance, so the dict goes through the dataclass's init path (`self_instance`),
    as pydantic's own dataclasses do for their __init__ arguments."""
    obj = object.__new__(cls)
    _adapter(cls).validator.validate_python(data, strict=True, self_instance=obj)
    return obj


ALL_CONFIGS = "all"       # `--time-config all`, `[eval] timing_configs = ["all"]`: time every config


def check_timing_names(names: Iterable[str] | None, where: str = "timing configs") -> None:
    """`all` stands alone: raises ConfigError when it comes with config names (the config file's
    [eval] timing_configs, the CLI's --time-config and every judge request are held to it)."""
    given = list(names or ())
    if ALL_CONFIGS in given and any(n != ALL_CONFIGS for n in given):
        others = ", ".join(n for n in given if n != ALL_CONFIGS)
        raise ConfigError(f"{where}: \"{ALL_CONFIGS}\" (time every config) cannot be combined with config names "
                          f"({others}); give either \"{ALL_CONFIGS}\" alone or the names of the configs to time.")


LANGUAGES = ("cuda", "triton")   # [llm] languages: what an LLM answer may be written in


def validate(cfg: Config) -> None:
    """The rules on values rather than types; raises ConfigError naming the first broken one."""
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
    # Only the API's floor: each call clamps the budget below its own max_tokens (engine.llm.client), so a small
    # max_tokens needs no matching thinking_budget.
    if llm.thinking in ("auto", "enabled") and llm.thinking_budget < 1024:
        raise ConfigError(f"[llm] thinking_budget must be at least 1024; got {llm.thinking_budget}. It is used only "
                          "by models without adaptive thinking.")
    for where, effort in (("[llm]", llm.effort), ("[verify]", cfg.verify.effort)):
        if effort is not None and effort not in efforts:
            raise ConfigError(f"{where} effort: expected low, medium, high, xhigh or max, got {effort!r}.")
    if llm.temperature is not None and not 0.0 <= llm.temperature <= 1.0:
        raise ConfigError(f"[llm] temperature must be between 0 and 1, got {llm.temperature}.")
    if (llm.timeout_s <= 0 or (llm.max_retries is not None and llm.max_retries < 0) or llm.backoff_base_s < 0
            or llm.backoff_max_s < 0 or llm.outage_minutes < 0):
        raise ConfigError("[llm] timeout_s must be positive; max_retries, outage_minutes and backoff times "
                          "non-negative.")
    if not llm.languages or any(lang not in LANGUAGES for lang in llm.languages) or \
            len(set(llm.languages)) != len(llm.languages):
        raise ConfigError(f"[llm] languages: a list of one or both of {', '.join(map(repr, LANGUAGES))}, each once; "
                          f"got {llm.languages!r}.")
    if llm.concurrency < 1:
        raise ConfigError(f"[llm] concurrency must be at least 1, got {llm.concurrency}.")
    if llm.context_tokens is not None and llm.context_tokens < 1024:
        raise ConfigError(f"[llm] context_tokens: the model's context length in tokens (e.g. 32768), at least "
                          f"1024; got {llm.context_tokens}.")
    if cfg.budget.usd is not None and cfg.budget.usd < 0:
        raise ConfigError(f"[budget] usd must be non-negative, got {cfg.budget.usd}.")
    if cfg.verify.thinking not in thinking:
        raise ConfigError(f"[verify] thinking: expected auto, adaptive, enabled or disabled, "
                          f"got {cfg.verify.thinking!r}.")
    if cfg.verify.max_tokens < 1:
        raise ConfigError("[verify] max_tokens must be positive.")
    if not 0.0 <= cfg.verify.min_confidence <= 1.0:
        raise ConfigError(f"[verify] min_confidence must be between 0 and 1, got {cfg.verify.min_confidence}.")
    if cfg.eval.trials is not None and cfg.eval.trials < 1:
        raise ConfigError(f"[eval] trials must be at least 1, got {cfg.eval.trials}.")
    if cfg.eval.timeout_s <= 0:
        raise ConfigError(f"[eval] timeout_s must be positive, got {cfg.eval.timeout_s}.")
    check_timing_names(cfg.eval.timing_configs, "[eval] timing_configs")
    if cfg.eval.library_policy is not None and cfg.eval.library_policy not in ("pure", "engineering"):
        raise ConfigError(f"[eval] library_policy: expected pure or engineering, got {cfg.eval.library_policy!r}.")
    if cfg.eval.mode not in EVAL_MODES:
        raise ConfigError(f"[eval] mode: expected {' or '.join(EVAL_MODES)}, got {cfg.eval.mode!r}.")
    if cfg.eval.keep_judge_s < 0:
        raise ConfigError(f"[eval] keep_judge_s is a number of seconds, 0 for none; got {cfg.eval.keep_judge_s}.")
    if not 0.0 <= cfg.eval.gpu_keep <= 1.0:
        raise ConfigError(f"[eval] gpu_keep is a share of the GPU's memory, from 0 to 1; got {cfg.eval.gpu_keep}.")
    for problem in cfg.timing.problems():   # the first, as every rule here
        raise ConfigError(f"[timing] {problem}.")
    if cfg.timing.checks < 1:   # the judge's own baseline jobs check none; a candidate's timing must be checked
        raise ConfigError(f"[timing] checks must be at least 1 (the checked timed iterations are how a stale or "
                          f"replayed output is caught while timing), got {cfg.timing.checks}.")
    ex = cfg.executor
    if ex.kind not in ("local", "ray"):
        raise ConfigError(f"[executor] kind: expected local or ray, got {ex.kind!r}.")
    if ex.retries < 0 or ex.build_cpus <= 0 or (ex.build_workers is not None and ex.build_workers < 1):
        raise ConfigError("[executor] retries must be non-negative, build_cpus positive, build_workers at least 1.")
    if ex.gpus is not None and not all(p.strip().isdigit() for p in ex.gpus.split(",")):
        raise ConfigError(f"[executor] gpus: expected GPU indices like \"0,1\", got {ex.gpus!r}.")
