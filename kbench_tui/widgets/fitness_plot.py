"""Best and median fitness (geomean speedup vs eager) per generation, drawn with Textual's Sparkline widget."""

from __future__ import annotations

from typing import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Sparkline, Static

LABEL_W = 7          # "median "
NOTE_W = 30          # room kept on the right for "  1.95x overall  (1.25x–1.95x)"


def series(values: Sequence[float | None]) -> list[float]:
    """Sparkline takes numbers only: a generation with nothing measured is drawn at the bottom of its line
    (the line's lowest measured value)."""
    measured = [v for v in values if v is not None]
    floor = min(measured, default=0.0)
    return [floor if v is None else v for v in values]


def _span(values: Sequence[float | None]) -> str:
    measured = [v for v in values if v is not None]
    return f"({min(measured):.2f}x–{max(measured):.2f}x)" if measured else "(nothing measured)"


class FitnessPlot(Vertical):
    """Two sparklines (best, median), one column per generation, the newest that fit; each line is scaled to its
    own range (Sparkline's rule), which the note after it gives."""

    DEFAULT_CSS = """
    FitnessPlot { height: 3; padding: 0 1; }
    FitnessPlot > Horizontal { height: 1; }
    FitnessPlot .label { width: auto; }
    FitnessPlot Sparkline { width: 1; }
    FitnessPlot .note { width: auto; }
    FitnessPlot #best-line > .sparkline--max-color { color: $success; }
    FitnessPlot #best-line > .sparkline--min-color { color: $success 40%; }
    FitnessPlot #median-line > .sparkline--max-color { color: $accent; }
    FitnessPlot #median-line > .sparkline--min-color { color: $accent 40%; }
    """

    def compose(self) -> ComposeResult:
        yield Static(Text("fitness: no generations yet", style="dim"), id="plot-empty")
        with Horizontal(id="best-row"):
            yield Static(Text("best   ", style="bold green"), classes="label")
            yield Sparkline([], id="best-line")
            yield Static("", id="best-note", classes="note")
        with Horizontal(id="median-row"):
            yield Static(Text("median ", style="cyan"), classes="label")
            yield Sparkline([], id="median-line")
            yield Static("", id="median-note", classes="note")
        yield Static("", id="plot-range")

    def on_mount(self) -> None:
        self._show_lines(False)

    def _show_lines(self, on: bool) -> None:
        self.query_one("#plot-empty").display = not on
        for wid in ("#best-row", "#median-row", "#plot-range"):
            self.query_one(wid).display = on

    def set_stats(self, stats: Sequence) -> None:
        """`stats`: GenerationStat-like (generation, best, median)."""
        empty = self.query_one("#plot-empty", Static)
        if not stats:
            empty.update(Text("fitness: no generations yet", style="dim"))
            self._show_lines(False)
            return
        width = max(10, (self.size.width or 80) - LABEL_W - NOTE_W)
        shown = list(stats)[-width:]
        best, median = [s.best for s in shown], [s.median for s in shown]
        if all(v is None for v in best + median):
            empty.update(Text(f"fitness: g{shown[0].generation}..g{shown[-1].generation}: nothing measured yet "
                              "(measurements need a GPU)", style="dim"))
            self._show_lines(False)
            return
        best_all = max((s.best for s in stats if s.best is not None), default=None)
        last_med = next((v for v in reversed(median) if v is not None), None)
        for name, values, note in (("best", best, f"{best_all:.2f}x overall" if best_all else ""),
                                   ("median", median, f"{last_med:.2f}x latest" if last_med else "")):
            line = self.query_one(f"#{name}-line", Sparkline)
            line.styles.width = len(values)        # one column per generation
            line.data = series(values)
            self.query_one(f"#{name}-note", Static).update(Text(f"  {note}  {_span(values)}".rstrip(), style="dim"))
        self.query_one("#plot-range", Static).update(
            Text(f"{' ' * LABEL_W}g{shown[0].generation}…g{shown[-1].generation}", style="dim"))
        self._show_lines(True)
