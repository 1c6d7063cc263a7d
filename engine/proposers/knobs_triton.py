"""The knobs a Triton candidate has without annotating them: its `BLOCK_*` sizes, `num_warps` and `num_stages`.

In kernel.py, a line `BLOCK_SIZE = 1024` (any name starting with BLOCK_, or NUM_WARPS / NUM_STAGES), and a literal
`num_warps=4` or `num_stages=3` passed to a launch or a triton.Config, are knobs the tuner may sweep, unless the line
carries its own `# kbench:knob values=...` annotation (engine/proposers/knobs.py), which then decides. The values
around the current one: a block size halved and doubled (powers of two from 16 to 16384), num_warps 1 to 16 in
powers of two, num_stages 1 to 5. Several literal `num_warps=` are several knobs, `num_warps`, `num_warps_2`, ...
in the order they are written. What a value does to correctness is the judge's to find out, as for any knob.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ASSIGN = re.compile(r"^(?P<pre>[ \t]*(?P<name>BLOCK_\w+|NUM_WARPS|NUM_STAGES)[ \t]*=[ \t]*)(?P<value>\d+)"
                     r"(?P<post>[ \t]*(?:#(?!\s*kbench:knob)[^\n]*)?)$", re.MULTILINE)
_KEYWORD = re.compile(r"(?P<pre>\b(?P<name>num_warps|num_stages)[ \t]*=[ \t]*)(?P<value>\d+)\b(?![ \t]*[.\w])")
_WARPS = ("1", "2", "4", "8", "16")
_STAGES = ("1", "2", "3", "4", "5")


@dataclass(frozen=True)
class Site:
    name: str          # the knob's name
    value: str
    values: tuple[str, ...]
    start: int         # where the value is written in the text
    end: int


def _values(name: str, value: str) -> tuple[str, ...]:
    v = int(value)
    if name.lower().startswith("num_warps"):
        pool = _WARPS
    elif name.lower().startswith("num_stages"):
        pool = _STAGES
    else:
        pool = tuple(str(1 << k) for k in range(4, 15))      # block sizes: 16 .. 16384
        if value not in pool:
            return (value,)
        i = pool.index(value)
        return pool[max(i - 1, 0):i + 2]
    return pool if value in pool else tuple(sorted({*pool, value}, key=int)) if v > 0 else (value,)


def sites(text: str, annotated: set[str] = frozenset()) -> list[Site]:
    """The implicit knobs of one kernel.py, in text order; names in `annotated` are left to their annotation."""
    out: list[Site] = []
    taken = set(annotated)
    for m in _ASSIGN.finditer(text):
        name = m.group("name")
        if name in taken:
            continue
        taken.add(name)
        out.append(Site(name, m.group("value"), _values(name, m.group("value")), m.start("value"), m.end("value")))
    counts: dict[str, int] = {}
    for m in _KEYWORD.finditer(text):
        base = m.group("name")
        counts[base] = counts.get(base, 0) + 1
        name = base if counts[base] == 1 else f"{base}_{counts[base]}"
        if name in taken or _in_comment(text, m.start()):
            continue
        out.append(Site(name, m.group("value"), _values(base, m.group("value")), m.start("value"), m.end("value")))
    out = [s for s in out if len(s.values) > 1]
    return sorted(out, key=lambda s: s.start)


def _in_comment(text: str, pos: int) -> bool:
    line_start = text.rfind("\n", 0, pos) + 1
    return "#" in text[line_start:pos]


def rewrite(text: str, settings: dict[str, str], annotated: set[str] = frozenset()) -> str:
    """`text` with the implicit knobs named in `settings` set."""
    out, last = [], 0
    for s in sites(text, annotated):
        new = settings.get(s.name)
        if new is not None:
            out += [text[last:s.start], new]
            last = s.end
    return "".join(out) + text[last:]
