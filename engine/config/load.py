"""Typed configuration, layered: defaults <- user file <- workspace file <- environment <- flags.

Files are TOML. The user file is `$XDG_CONFIG_HOME/kbench/config.toml` (default `~/.config/...`), the
workspace file `<workspace>/.kbench/config.toml`. Known sections become typed dataclasses and are checked
key by key (a typo names its file); sections this module does not know are kept raw in `Config.extra`
so other parts (harness, TUI) can read theirs without touching this loader.

API keys are never read from files: `ANTHROPIC_API_KEY` (or the variable `[llm] api_key_env` names) stays in
the environment (see engine.llm.availability).

The section dataclasses are in engine.config.sections, their checks in engine.config.checks, the LLM price table
in engine.config.prices and the KBENCH_* environment registry in engine.config.env; this module loads and merges
the layers.
"""

from __future__ import annotations

import copy
import os
import tomllib
from pathlib import Path
from typing import Any, Mapping

from engine.config.checks import keys as _keys
from engine.config.checks import section as _section
from engine.config.checks import validate as _validate

from engine.config.sections import _SECTIONS, Config
from engine.errors import ConfigError


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

