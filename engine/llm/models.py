"""What a Claude model accepts: thinking types, effort levels, strict tools, its output limit.

The Models API (`GET /v1/models/{id}`) answers this for the models a key can use; its `capabilities` object
is read when the API is reachable and cached (in memory, and for a day on disk under $KBENCH_CACHE). When it
is not (offline tests, a proxy without the endpoint), a built-in table keyed by family and version answers,
from the model pages read on 2026-11-23 (docs/formats.md, "LLM: what the API documents").

Two rules the Models API does not expose come from the table either way: which models refuse
`thinking: {"type": "disabled"}` above some effort (Claude Opus 5 allows it only at effort high or below),
and that a forced `tool_choice` is refused whenever thinking is on.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from engine.config import cache_dir

log = logging.getLogger("kbench.llm")

EFFORTS = ("low", "medium", "high", "xhigh", "max")
_CACHE_TTL_S = 24 * 3600


@dataclass(frozen=True)
class ModelCaps:
    """What one model accepts. `source`: "api" (the Models API said so), "table" or "unknown" (an id the
    table does not know: treated as the newest generation, which is the strictest)."""

    model: str
    adaptive: bool
    enabled: bool                    # thinking.type "enabled" with budget_tokens (older models only)
    disabled: bool                   # thinking.type "disabled"
    efforts: frozenset[str] = frozenset()
    strict_tools: bool = False       # structured outputs / `strict: true` tool schemas
    max_output: int = 64000
    disabled_max_effort: str | None = None   # "disabled" is refused above this effort
    source: str = "table"

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


def table_caps(model: str) -> ModelCaps:
    """The documented behaviour of `model` by family and version (see the module docstring)."""
    parsed = parse_model_id(model)
    if parsed is None:
        return _newest(model, "unknown")
    family, v = parsed
    if family in ("fable", "mythos"):
        # Fable/Mythos 5 and later, and Mythos Preview: adaptive only; "enabled" and "disabled" are refused.
        return ModelCaps(model, True, False, False, _ALL if v >= (5, 0) else _NO_XHIGH, True, 128000)
    if family == "opus":
        if v >= (5, 5):
            return ModelCaps(model, True, False, False, _ALL, True, 128000)   # thinking always on
        if v >= (5, 0):
            return ModelCaps(model, True, False, True, _ALL, True, 128000, disabled_max_effort="high")
        if v >= (4, 7):
            return ModelCaps(model, True, False, False, _ALL, True, 128000)   # adaptive only
        if v == (4, 6):
            return ModelCaps(model, True, True, True, _NO_XHIGH, True, 128000)
        if v == (4, 5):
            return ModelCaps(model, False, True, True, _BASIC, True, 64000)
        return ModelCaps(model, False, True, True, frozenset(), v >= (4, 1), 32000)
    if family == "sonnet":
        if v >= (5, 0):
            return ModelCaps(model, True, False, True, _ALL, True, 128000)
        if v == (4, 6):
            return ModelCaps(model, True, True, True, _NO_XHIGH, True, 64000)
        return ModelCaps(model, False, True, True, frozenset(), v >= (4, 5), 64000)
    if family == "haiku":
        if v >= (5, 0):
            return ModelCaps(model, True, False, True, _BASIC | {"max"}, True, 128000)
        return ModelCaps(model, False, True, True, frozenset(), v >= (4, 5), 64000)
    return _newest(model, "unknown")


def _newest(model: str, source: str) -> ModelCaps:
    # An id the table does not know is most likely newer than it: assume the strictest current rules
    # (adaptive only, no forced tool), which every current model accepts.
    return ModelCaps(model, True, False, False, _BASIC, False, 64000, source=source)


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
                     disabled=ok(types.get("disabled")) if "disabled" in types else True, efforts=efforts,
                     strict_tools=ok(cap.get("structured_outputs")),
                     max_output=int(obj.get("max_tokens") or base.max_output),
                     disabled_max_effort=base.disabled_max_effort, source="api")


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

