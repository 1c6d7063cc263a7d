"""Fixtures of the workspace tests."""

from __future__ import annotations

import pytest

from engine.candidates import Candidate


@pytest.fixture
def task(layernorm_task):
    """The task the workspace tests record candidates for: the built-in layernorm, as a folder of the user's own."""
    return layernorm_task


def plain_cand(tag: str) -> Candidate:
    """The smallest native candidate, named TAG (its kernel.cu is the comment `// TAG`, so each tag has its own
    source hash). Imported by the tests that use it (`from tests.workspace.conftest import plain_cand`)."""
    return Candidate("native", {"kernel.cu": f"// {tag}\n", "binding.cpp": "// glue\n"}, tag)
