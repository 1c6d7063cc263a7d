"""Fixtures of the TUI tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def demo(tmp_path):
    """The path of a demo workspace at `tmp_path/ws`, closed, for an app to open: session "demo" on gelu_bias
    with 5 candidates over 3 generations (tests.doubles.tui.build_demo_workspace)."""
    from tests.doubles.tui import build_demo_workspace

    build_demo_workspace(tmp_path / "ws").close()
    return tmp_path / "ws"
