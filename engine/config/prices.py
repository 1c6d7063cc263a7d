"""LLM prices: the `Price` record, Anthropic's list prices and the reader of `[llm.prices."<model>"]`.

`LLMConfig.price_for` (engine/config/sections.py) does the lookup.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Mapping

from engine.errors import ConfigError


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cache_write: float  # 5-minute cache writes
    cache_read: float


FREE = Price(0.0, 0.0, 0.0, 0.0)

# Anthropic list prices (USD per million tokens: input, output, 5-minute cache write, cache hit), read from
# the pricing and model pages on 2026-11-29 (docs/formats.md, "LLM: what the API documents"). Matched by
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
    "claude-haiku-5-5": Price(0.10, 0.50, 0.125, 0.01),   # prompts up to 100k tokens; above: LONG_PROMPT_PRICES
    "claude-haiku-4-5": Price(1.0, 5.0, 1.25, 0.10),
    "*": Price(15.0, 75.0, 18.75, 1.50),
}

# Models whose whole request is billed at a higher rate once its prompt (input, cache writes and reads) passes
# a number of tokens: (that number, the price above it). Applied only while the model's price is the default.
LONG_PROMPT_PRICES: dict[str, tuple[int, Price]] = {
    "claude-haiku-5-5": (100_000, Price(0.50, 2.50, 0.625, 0.05)),
}

# A dated snapshot id (claude-haiku-4-5-20251001) is priced as its undated entry (LLMConfig.price_for).
_SNAPSHOT = re.compile(r"-(\d{8})$")


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
