"""A checkbox whose box is empty when off: Textual's own draws an X in both states (only its colour
changes), so on a monochrome terminal, or to a newcomer, an unticked box read as ticked."""

from __future__ import annotations

from textual.widgets import Checkbox


class Toggle(Checkbox):
    @property
    def BUTTON_INNER(self) -> str:  # noqa: N802 - the name Textual's ToggleButton reads
        return "X" if self.value else " "
