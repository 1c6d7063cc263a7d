"""Verdicts by stage (with reasons and overrides) and every measurement (GPU, versions, time)."""

from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from engine.verdict import Stage
from kbench_tui.view_models import WAITING_FOR_GPU, status_text
from kbench_tui.wording import event_text

STYLE = {"pass": "green", "fail": "bold red", "suspicious": "bold yellow", "skipped": "dim"}


def fmt_x(v: float | None) -> str:
    return f"{v:.3f}x" if v is not None else "-"


def fmt_ms(v: float | None) -> str:
    return f"{v:.4f}" if v is not None else "-"


def library_lines(stage) -> list[str]:
    """The library uses the static stage tagged (engineering policy), one line per library with its sites."""
    data = stage.verdict.verdict.data if stage is not None and stage.verdict is not None else {}
    uses = data.get("libraries") or {}
    if not uses:
        return []
    out = [f"libraries ({data.get('policy', '?')} policy): " +
           ", ".join(f"{lib} x{len(sites)}" for lib, sites in sorted(uses.items()))]
    for lib, sites in sorted(uses.items()):
        out += [f"  {lib}: {site}" for site in sites[:3]] + ([f"  {lib}: ... {len(sites) - 3} more"]
                                                            if len(sites) > 3 else [])
    return out


class VerdictTable(VerticalScroll):
    DEFAULT_CSS = """
    VerdictTable { height: 1fr; }
    VerdictTable DataTable { height: auto; max-height: 16; margin-bottom: 1; }
    """

    def compose(self):
        yield Static("", id="verdict-summary")
        yield DataTable(id="stages", cursor_type="row", zebra_stripes=True)
        yield Static(Text("Measurements", style="bold"))
        yield DataTable(id="measurements", cursor_type="row")
        yield Static("", id="history")

    def on_mount(self) -> None:
        self.query_one("#stages", DataTable).add_columns("stage", "status", "reason", "verdicts", "override")
        self.query_one("#measurements", DataTable).add_columns(
            "at", "gpu", "driver", "torch", "cuda", "vs eager", "vs compile", "timed configs (ms)")

    def show(self, view, gpu_notice: str = "") -> None:
        st = view.status
        stages = self.query_one("#stages", DataTable)
        stages.clear()
        for s in st.stages.values():
            ov = (f"{s.override.from_status or 'none'}→{s.override.to_status.value}: {s.override.reason}"[:48]
                  if s.override else "")
            why = s.verdict.verdict.reason if s.verdict else ""
            stages.add_row(s.stage, Text(s.status.value, style=STYLE.get(s.status.value, "")),
                           why if len(why) <= 52 else why[:51] + "…", str(s.verdicts), ov, key=s.stage)
        meas = self.query_one("#measurements", DataTable)
        meas.clear()
        for m in reversed(st.measurements):
            cfgs = ", ".join(f"{c.config} {c.ms:.4g}" for c in m.configs)
            meas.add_row(m.at[:19], m.gpu or "-", m.driver or "-", m.torch or "-", m.cuda or "-",
                         fmt_x(m.speedup_eager), fmt_x(m.speedup_compile), cfgs)
        summary = Text()
        summary.append(f"{view.record.id}  ", style="bold")
        summary.append("eligible" if st.eligible else "not eligible", style="green" if st.eligible else "yellow")
        summary.append(f"  speedup {fmt_x(st.speedup)} vs eager, {fmt_x(st.speedup_compile)} vs torch.compile")
        if not st.measurements:
            if status_text(view) == WAITING_FOR_GPU:
                summary.append(f"\n{WAITING_FOR_GPU}: compiled; correctness and timing are measured where a GPU "
                               "is visible (e re-evaluates it there, or resume the session there)", style="cyan")
            else:
                summary.append(f"\nno measurement yet. {gpu_notice}".rstrip(), style="dim")
        libs = library_lines(st.stages.get(Stage.STATIC))
        if libs:
            summary.append("\n" + "\n".join(libs), style="cyan")
        self.query_one("#verdict-summary", Static).update(summary)
        hist = Text()
        for o in st.overrides:
            hist.append(f"override {o.at[:19]} {o.stage}: {o.from_status or 'none'} → {o.to_status.value} by {o.by}: "
                        f"{o.reason}\n", style="yellow")
        for e in st.events:
            hist.append(f"{e.at[:19]} {event_text(e.event, e.data)}\n", style="dim")
        for c in st.comments:
            hist.append(f"comment: {c.text}\n", style="italic")
        self.query_one("#history", Static).update(hist)
