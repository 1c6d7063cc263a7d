"""Dataclasses to JSON-able data and back, through pydantic: one TypeAdapter per type, built on first use.

`dump(obj)` is what json.dumps should write for a dataclass whose JSON mirrors its fields: the fields in order,
nested dataclasses as objects, enums by value, tuples as lists. NaN and the infinities stay floats (json.dumps
writes them as NaN / Infinity, as it always did), and a value of a type pydantic does not know becomes
str(value), as the writers' `json.dumps(default=str)` made it. A value of another type than its field's is
written as it is, unchecked: reading checks. One difference from a hand-written mirror: an int held in a field
typed float is written as a float (3.0), which reads back the same.

`load(cls, data, what)` builds `cls` from such data: pydantic's lax mode (a "3" for an int, an int for a float,
a list for a tuple), fields it leaves out at their defaults, keys `cls` lacks ignored (a later kbench may add
fields). A missing or mistyped field raises DataError naming `what` (the file or message being read), the field,
what was expected and what was found. Nothing is written or dropped: the caller still holds the data.

Where a format is not a mirror of the fields (renamed keys, computed fields, older formats still read), the type
keeps its explicit to_json / from_json, which says why.

Lazy imports: pydantic, on first use: importing this module (every layer does) must not load it, as the jailed
runner and profile child cannot reach it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, TypeVar

from engine.errors import DataError

T = TypeVar("T")


@functools.cache
def _adapter(cls: type) -> Any:
    from pydantic import ConfigDict, TypeAdapter
    # The root is `cls | None` only so that it may carry a config (pydantic refuses one on a dataclass's own
    # adapter), and the root's is what values typed Any (a verdict's `data`) are serialised with: NaN and the
    # infinities must stay floats there too, not become null. load() keeps None out.
    return TypeAdapter(cls | None, config=ConfigDict(ser_json_inf_nan="constants"))


def dump(obj: Any) -> dict[str, Any]:
    """`obj` (a dataclass instance) as JSON-able data."""
    return _adapter(type(obj)).dump_python(obj, mode="json", fallback=str, warnings=False)


def load(cls: type[T], data: Any, what: str = "") -> T:
    """`cls` from `data` (what json.loads gave); DataError, naming `what`, where it does not hold one."""
    from pydantic import ValidationError

    what = what or f"a {cls.__name__}"
    if not isinstance(data, dict):
        raise DataError(f"{what}: expected a JSON object ({cls.__name__}), got {_shown(data)}.")
    try:
        return _adapter(cls).validate_python(data)
    except ValidationError as exc:
        problems = [f"{_path(e['loc'])}: {_lower(e['msg'])}" + ("" if e["type"] == "missing" else
                                                                 f", got {_shown(e['input'])}")
                    for e in exc.errors()]
        raise DataError(f"{what}: not a valid {cls.__name__}: " + "; ".join(problems) + ".") from None


def load_trusted(cls: type[T], data: dict[str, Any]) -> T:
    """`cls` from data kbench itself wrote, without pydantic (for a jailed child, where it cannot be imported):
    keys `cls` lacks are ignored, nothing else is checked. Never for data candidate code could have written."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


def _path(loc: tuple[Any, ...]) -> str:
    """("verdicts", 0, "status") -> "verdicts[0].status"."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "(the object)"


def _lower(msg: str) -> str:
    return msg[:1].lower() + msg[1:]


def _shown(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
