"""Where the tests find the repository and their fixtures, whichever folder under tests/ they sit in."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
LLM_FIXTURES = FIXTURES / "llm"      # stub LLM modules (`stub_llm`, ...) that tests import by name
