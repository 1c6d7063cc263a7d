"""What a Claude model accepts: thinking types, effort levels, forced tools, strict tools, its output limit
and context window, and the shortest prompt prefix it caches.

The Models API (`GET /v1/models/{id}`) answers most of this for the models a key can use; its
`capabilities` object is read when the API is reachable and cached (in memory, and for a day on disk under
$KBENCH_CACHE). When it is not (offline tests, a proxy without the endpoint), a built-in table keyed by family
and version answers, from the model pages read on 2026-11-29 (docs/formats.md, "LLM: what the API documents").

The table fails safe. A model newer than the newest version it knows of a family (or of no known family) gets
the shape every current model accepts: adaptive thinking, `tool_choice: auto`, low to high effort, no
`disabled`. And a 400 that names one of these capabilities corrects the entry for the rest of the process
(`ModelCatalog.refused`), so a stale table costs one refused call, never the session.

Rules the Models API does not expose come from the table either way: which models refuse `disabled` above
some effort (Opus 5 and Haiku 5.5 take it only at effort high or below), which refuse a forced `tool_choice`
even with thinking off (Fable 5.1 and later, Opus 5.5, Sonnet 5.5), the thinking display a model uses when
the request names none, and the prompt-caching minimum.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from engine.config.env import cache_dir

log = logging.getLogger("kbench.llm")

EFFORTS = ("low", "medium", "high", "xhigh", "max")
_CACHE_TTL_S = 24 * 3600


@dataclass(frozen=True)
class ModelCaps:
    """What one model accepts. `source`: "api" (the Models API said so), "table", "corrected" (a 400 named a
    capability the table claimed), or "unknown" (an id the table does not know: the safe shape)."""

    model: str
    adaptive: bool
    enabled: bool                    # thinking.type "enabled" with budget_tokens (older models only)
    disabled: bool                   # thinking.type "disabled"
    efforts: frozenset[str] = frozenset()
    strict_tools: bool = False       # structured outputs / `strict: true` tool schemas
    max_output: int = 64000
    disabled_max_effort: str | None = None   # "disabled" is refused above this effort
    source: str = "table"
    forced_tool: bool = True         # tool_choice {"type": "tool"} accepted (with thinking off)
    between_tools: bool = False      # thinking.type "between_tools": thinking off, updates between tool calls
    context: int = 200_000           # the context window (max_input_tokens)
    cache_min: int = 4096            # the shortest prefix prompt caching keeps, tokens

    def effort_for(self, wanted: str | None) -> str | None:
        """The highest supported effort level at or below `wanted` (None: leave effort out)."""
        if wanted is None or not self.efforts:
            return None
        i = EFFORTS.index(wanted)
        for level in reversed(EFFORTS[: i + 1]):
            if level in self.efforts:
                return level
        return None

    def can_disable(self, effort: str | None) -> bool:
        if not self.disabled:
            return False
        if self.disabled_max_effort is None or effort is None:
            return True
        return EFFORTS.index(effort) <= EFFORTS.index(self.disabled_max_effort)

    # Explicit, not engine.jsonable: the efforts (a frozenset) are written in level order, not set order.
    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["efforts"] = sorted(self.efforts, key=EFFORTS.index)
        return d

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "ModelCaps":
        d = dict(obj)
        d["efforts"] = frozenset(d.get("efforts") or ())
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


# -- the built-in table ------------------------------------------------------------------------------

_ID = re.compile(r"^(?:[a-z]+\.)?claude-(?P<family>[a-z]+)-(?P<major>\d+)(?:-(?P<minor>\d{1,2}))?"
                 r"(?:-(?P<date>\d{8}))?(?:-v\d+(?::\d+)?)?(?:@\d{8})?$")

_ALL = frozenset(EFFORTS)
_NO_XHIGH = frozenset({"low", "medium", "high", "max"})
_BASIC = frozenset({"low", "medium", "high"})


def parse_model_id(model: str) -> tuple[str, tuple[int, int]] | None:
    """("opus", (5, 5)) for "claude-opus-5-5"; ("mythos", (0, 0)) for the preview; None when not Claude."""
    if model in ("claude-mythos-preview",):
        return "mythos", (4, 9)      # between Opus 4.8 and the 5 generation, as its documentation places it
    m = _ID.match(model)
    if not m:
        return None
    return m.group("family"), (int(m.group("major")), int(m.group("minor") or 0))


# The newest version of each family the table knows: anything newer gets the safe shape.
_NEWEST = {"fable": (5, 2), "mythos": (5, 2), "opus": (5, 5), "sonnet": (5, 5), "haiku": (5, 5)}


def table_caps(model: str) -> ModelCaps:
    """The documented behaviour of `model` by family and version (see the module docstring)."""
    parsed = parse_model_id(model)
    if parsed is None:
        return _newest(model, "unknown")
    family, v = parsed
    if family not in _NEWEST or v > _NEWEST[family]:
        return _newest(model, "unknown")
    big = {"strict_tools": True, "max_output": 128000, "context": 1_000_000}
    if family in ("fable", "mythos"):
        if v >= (5, 0):   # adaptive only, always on; Fable/Mythos 5.1 and later refuse a forced tool_choice
            return ModelCaps(model, True, False, False, _ALL, forced_tool=v < (5, 1), cache_min=512, **big)
        return ModelCaps(model, True, False, False, _NO_XHIGH, cache_min=2048, **big)   # Mythos Preview
    if family == "opus":
        if v >= (5, 5):   # thinking always on, `disabled` refused at every effort, no forced tool_choice
            return ModelCaps(model, True, False, False, _ALL, forced_tool=False, cache_min=512, **big)
        if v >= (5, 0):
            return ModelCaps(model, True, False, True, _ALL, disabled_max_effort="high", cache_min=512, **big)
        if v >= (4, 7):   # adaptive only (thinking off unless asked)
            return ModelCaps(model, True, False, True, _ALL, cache_min=1024 if v >= (4, 8) else 2048, **big)
        if v == (4, 6):
            return ModelCaps(model, True, True, True, _NO_XHIGH, **big)
        if v == (4, 5):
            return ModelCaps(model, False, True, True, _BASIC, True, 64000)
        return ModelCaps(model, False, True, True, frozenset(), v >= (4, 1), 32000, cache_min=1024)
    if family == "sonnet":
        if v >= (5, 5):   # `between_tools` instead of `disabled`; no forced tool_choice
            return ModelCaps(model, True, False, False, _ALL, forced_tool=False, between_tools=True, cache_min=512,
                             **big)
        if v >= (5, 0):
            return ModelCaps(model, True, False, True, _ALL, cache_min=1024, **big)
        if v == (4, 6):   # 128k output in the docs, 64k in some listings: the smaller one is safe
            return ModelCaps(model, True, True, True, _NO_XHIGH, True, 64000, context=1_000_000, cache_min=1024)
        return ModelCaps(model, False, True, True, frozenset(), v >= (4, 5), 64000, cache_min=1024)
    if v >= (5, 5):       # haiku
        return ModelCaps(model, True, False, True, _ALL, disabled_max_effort="high", cache_min=512, **big)
    return ModelCaps(model, False, True, True, frozenset(), v >= (4, 5), 64000)


def _newest(model: str, source: str) -> ModelCaps:
    # An id the table does not know is most likely newer than it: the shape every current model accepts
    # (adaptive thinking, no forced tool, no `disabled`, low to high effort).
    return ModelCaps(model, True, False, False, _BASIC, False, 64000, source=source, forced_tool=False)


def corrected(caps: ModelCaps, message: str) -> ModelCaps | None:
    """The capabilities a 400's message shows to be wrong, corrected toward the safe shape; None when the
    message names none of them (the request was refused for something else)."""
    low = message.lower()
    fixes: dict[str, Any] = {}
    if "thinking.type.disabled" in low or '{"type": "disabled"}' in low:
        fixes["disabled"] = False
    if "thinking.type.enabled" in low:
        fixes["enabled"] = False
    if "adaptive thinking is not supported" in low:
        fixes["adaptive"] = False
    if "thinking.type.between_tools" in low:
        fixes["between_tools"] = False
    if 'tool_choice: type "tool"' in low or "forces tool use" in low:
        fixes["forced_tool"] = False
    if "output_config.effort" in low and caps.efforts:
        fixes["efforts"] = frozenset()          # no effort sent: the model's default, always accepted
    if m := re.search(r"max_tokens: \d+ > (\d+)", message):
        fixes["max_output"] = int(m.group(1))
    if not fixes:
        return None
    fixed = replace(caps, **fixes, source="corrected")
    return None if fixed == replace(caps, source="corrected") else fixed


def caps_from_api(info: Any, model: str) -> ModelCaps | None:
    """ModelCaps from a Models API `ModelInfo` (SDK object or its JSON); None when it has no capabilities."""
    obj = info.model_dump(mode="json") if hasattr(info, "model_dump") else dict(info or {})
    cap = obj.get("capabilities")
    if not isinstance(cap, dict):
        return None

    def ok(d: Any) -> bool:
        return bool(isinstance(d, dict) and d.get("supported"))

    thinking = cap.get("thinking") or {}
    types = thinking.get("types") or {}
    effort = cap.get("effort") or {}
    efforts = frozenset(e for e in EFFORTS if ok(effort.get(e))) if effort.get("supported") else frozenset()
    base = table_caps(model)
    return ModelCaps(model, adaptive=ok(types.get("adaptive")), enabled=ok(types.get("enabled")),
                     disabled=ok(types.get("disabled")) if "disabled" in types else base.disabled, efforts=efforts,
                     strict_tools=ok(cap.get("structured_outputs")),
                     max_output=int(obj.get("max_tokens") or base.max_output),
                     disabled_max_effort=base.disabled_max_effort, source="api",
                     # not in the Models API: the table's word, or the safe one for a model it does not know
                     forced_tool=base.forced_tool, between_tools=ok(types.get("between_tools")),
                     context=int(obj.get("max_input_tokens") or base.context), cache_min=base.cache_min)


# -- the catalogue: Models API answers, cached --------------------------------------------------------

def cache_file(env: Mapping[str, str]) -> Path | None:
    """$KBENCH_CACHE/models.json, else ~/.cache/kbench/models.json; None when neither can be placed."""
    # only the given environment decides: a test's or a child's env without HOME writes no file
    root = cache_dir(env) or (Path(env["HOME"]) / ".cache" / "kbench" if env.get("HOME") else None)
    return root / "models.json" if root else None


@dataclass
class ModelCatalog:
    """Capabilities per (endpoint, model). `fetch(model)` asks the Models API (returns a ModelInfo or raises);
    an answer is kept on disk for a day; a failure falls back to the table for the rest of this process."""

    fetch: Callable[[str], Any] | None
    endpoint: str = ""
    path: Path | None = None
    clock: Callable[[], float] = time.time
    _mem: dict[str, ModelCaps] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def caps(self, model: str) -> ModelCaps:
        with self._lock:
            hit = self._mem.get(model)
            if hit is not None:
                return hit
            caps = self._from_disk(model) or self._ask(model)
            self._mem[model] = caps
            return caps

    def refused(self, model: str, message: str) -> ModelCaps | None:
        """A 400 said `message` for `model`: the corrected capabilities for the rest of this process, or None
        when the message names no capability (then nothing changes and the caller gives up)."""
        with self._lock:
            caps = self._mem.get(model) or table_caps(model)
            fixed = corrected(caps, message)
            if fixed is not None:
                log.warning("the API refused a request to %s (%s); kbench's capabilities corrected to %s", model,
                            message, fixed)
                self._mem[model] = fixed
            return fixed

    def _key(self, model: str) -> str:
        return f"{self.endpoint}|{model}"

    def _from_disk(self, model: str) -> ModelCaps | None:
        data = self._read()
        row = data.get(self._key(model))
        if not isinstance(row, dict) or self.clock() - float(row.get("at", 0)) > _CACHE_TTL_S:
            return None
        try:
            return ModelCaps.from_json(row["caps"])
        except (KeyError, TypeError, ValueError):
            return None

    def _ask(self, model: str) -> ModelCaps:
        if self.fetch is None:
            return table_caps(model)
        try:
            caps = caps_from_api(self.fetch(model), model)
        except Exception as exc:  # noqa: BLE001 - an unreachable Models API is not an error: the table answers
            log.info("Models API gave no capabilities for %s (%s); using kbench's table", model, exc)
            caps = None
        if caps is None:
            return table_caps(model)
        self._write(model, caps)
        return caps

    def _read(self) -> dict[str, Any]:
        if self.path is None or not self.path.is_file():
            return {}
        try:
            data = json.loads(self.path.read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _write(self, model: str, caps: ModelCaps) -> None:
        if self.path is None:
            return
        data = self._read()
        data[self._key(model)] = {"at": self.clock(), "caps": caps.to_json()}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            os.replace(tmp, self.path)
        except OSError as exc:
            log.info("cannot write the model capability cache %s: %s", self.path, exc)

