"""make_client: the LLM client for `[llm] provider`, LLMClient (Anthropic) or OpenAICompatClient.

Its own module because it names both providers, and engine.llm.openai_client builds on engine.llm.client's
request and answer shapes: in either of those two modules the factory would close a cycle between them.
"""

from __future__ import annotations

from typing import Any

from engine.config.sections import LLMConfig
from engine.llm.accounting import CostLedger
from engine.llm.client import LLMClient
from engine.llm.openai_client import OpenAICompatClient


def make_client(config: LLMConfig, ledger: CostLedger | None = None, **kw: Any) -> LLMClient | OpenAICompatClient:
    """The client for `[llm] provider`: LLMClient (Anthropic) or OpenAICompatClient."""
    if config.provider == "openai-compatible":
        return OpenAICompatClient(config, ledger, **kw)
    return LLMClient(config, ledger, **kw)
