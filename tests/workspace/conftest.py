"""Fixtures of the workspace tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def task(layernorm_task):
    """The task the workspace tests record candidates for: the built-in layernorm, as a folder of the user's own."""
    return layernorm_task
