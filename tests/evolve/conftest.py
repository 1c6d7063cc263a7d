"""Fixtures of the evolution tests."""

from __future__ import annotations

import pytest

from engine.tasks.loader import load_task


@pytest.fixture(scope="module")
def task():
    """The built-in gelu_bias task, which the fake evaluator (tests/doubles/evaluator.py) scores without a GPU."""
    return load_task("gelu_bias")
