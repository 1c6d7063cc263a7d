"""The session's live log: one line per engine event, stamped with the time the event happened (not the time
the line was drawn: a session opened again shows its earlier lines with their own times). Long lines wrap, so
a stop reason is read whole; `l` cycles the pane through larger (most of the screen, scrollable), hidden and
back."""

from __future__ import annotations

import time

from textual.widgets import RichLog

SIZES = ("normal", "large", "hidden")


class LogView(RichLog):
    DEFAULT_CSS = """
    LogView { height: 7; border-top: solid $primary-darken-2; }
    LogView.-large { height: 1fr; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(max_lines=2000, wrap=True, markup=False, highlight=False, **kw)
        self.lines_written: list[str] = []   # kept for tests and snapshots
        self.size_name = "normal"

    def add(self, line: str, at: float | None = None) -> None:
        """Write `line`, stamped with `at` (a time.time(); now when None)."""
        stamp = time.strftime("%H:%M:%S", time.localtime(at if at is not None else time.time()))
        self.lines_written.append(line)
        self.write(f"{stamp} {line}")

    def cycle_size(self) -> str:
        """normal -> large -> hidden -> normal; returns the new size."""
        self.size_name = SIZES[(SIZES.index(self.size_name) + 1) % len(SIZES)]
        self.display = self.size_name != "hidden"
        self.set_class(self.size_name == "large", "-large")
        return self.size_name
