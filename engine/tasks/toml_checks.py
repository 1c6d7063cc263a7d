"""Catch the task.toml mistakes that would otherwise be accepted in silence (docs/formats.md, "task.toml").

The loader reads the keys it knows and ignored everything else, so a misspelled `[[notconfigs]]`, an `atoll`
or a `rtol = "1e-5"` (a string that float() happily converts) went unnoticed. Here: an unknown key is an
error naming it (and the key it most likely meant), a number written as a string is an error, and a task
with fewer than the documented 3 configs loads with a warning (TaskWarning; the CLI prints it).
"""

from __future__ import annotations

import difflib
import warnings
from pathlib import Path
from typing import Any

from engine.errors import TaskError, TaskWarning

TOP_KEYS = ("name", "description", "tags", "dtype", "directions", "library_policy", "forward", "backward",
            "configs")
DIRECTION_KEYS = ("signature", "atol", "rtol", "flops", "bytes", "max_mismatch_fraction", "no_grad")
CONFIG_KEYS = ("name", "args", "seed", "init", "tags")
NUMBERS = ("atol", "rtol", "max_mismatch_fraction")
MIN_CONFIGS = 3


def check_meta(meta: dict[str, Any], toml_path: Path) -> None:
    """Raise TaskError for an unknown key or a mistyped value; warn for too few configs."""
    _known(meta, TOP_KEYS, toml_path, "at the top level")
    for d in ("forward", "backward"):
        section = meta.get(d)
        if section is None:
            continue
        if not isinstance(section, dict):
            raise TaskError(f"{toml_path}: `{d}` must be a table ([{d}]), not {_kind(section)}.")
        _known(section, DIRECTION_KEYS, toml_path, f"in [{d}]")
        for key in NUMBERS:
            if key in section:
                _number(section[key], key, toml_path, f"[{d}]")
        for key in ("flops", "bytes"):
            value = section.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int, float))):
                raise TaskError(f"{toml_path}: [{d}] {key} must be an expression in a string or a number, "
                                f"not {_kind(value)}.")
    configs = meta.get("configs")
    if configs is not None and not (isinstance(configs, list) and all(isinstance(c, dict) for c in configs)):
        raise TaskError(f"{toml_path}: `configs` must be an array of tables ([[configs]] blocks), "
                        f"not {_kind(configs)}.")
    for i, raw in enumerate(configs or ()):
        where = f"[[configs]] #{i + 1}" + (f" ({raw['name']})" if isinstance(raw.get("name"), str) else "")
        _known(raw, CONFIG_KEYS, toml_path, f"in {where}")
        if "args" in raw and not isinstance(raw["args"], dict):
            raise TaskError(f"{toml_path}: {where}: `args` must be a table, e.g. args = {{ batch = 7 }}, "
                            f"not {_kind(raw['args'])}.")
        if "seed" in raw and (isinstance(raw["seed"], bool) or not isinstance(raw["seed"], int)):
            raise TaskError(f"{toml_path}: {where}: `seed` must be an integer, not {_kind(raw['seed'])}.")
    if isinstance(configs, list) and 0 < len(configs) < MIN_CONFIGS:
        warnings.warn(TaskWarning(
            f"{toml_path}: {len(configs)} config(s); a task needs at least {MIN_CONFIGS}, with sizes that are not "
            "multiples of 32 among them, or a shape-specialised kernel passes (docs/formats.md, task.toml)"),
            stacklevel=3)


def _known(table: dict[str, Any], known: tuple[str, ...], toml_path: Path, where: str) -> None:
    for key in table:
        if key in known:
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f" (did you mean `{close[0]}`?)" if close else ""
        raise TaskError(f"{toml_path}: unknown key `{key}` {where}{hint}; the keys there are "
                        f"{', '.join(known)} (docs/formats.md, task.toml).")


def _number(value: Any, key: str, toml_path: Path, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        shown = f"the string {value!r}: write {key} = {value} without quotes" if isinstance(value, str) \
            else _kind(value)
        raise TaskError(f"{toml_path}: {where} {key} must be a number, not {shown}.")


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return f"the string {value!r}"
    return {dict: "a table", list: "an array", bool: "a boolean"}.get(type(value), type(value).__name__)
