"""Candidates of a session grouped by generation, with their parents, status and speedup.

A line-API widget (a `ScrollView` that renders only the lines on screen): a row is built from its
CandidateView when it scrolls into view and cached, so opening a 10,000-candidate session and moving the
cursor cost the same as for ten. (Textual's DataTable measures every row on load: seconds at 10,000.)
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kbench_tui.view_models import status_text

COLUMNS = (("gen", 5), ("candidate", 12), ("op", 10), ("parents", 18), ("status", 18), ("speedup", 9),
           ("title", 60))
STYLES = {"ok": Style(color="green"), "fail": Style(color="red", bold=True), "suspicious": Style(color="yellow"),
          "damaged": Style(color="red", bold=True), "waiting": Style(color="cyan"), "other": Style(dim=True)}


def short(cid: str, session: str) -> str:
    return cid[len(session) + 1:] if cid.startswith(session + "-") else cid


# A tuner's title is its parent's with the knob change appended (`...-baseline-vec2-block_size512`): cut from the
# left, it still shows what changed; any other title reads from its start.
CUT_LEFT_OPERATORS = frozenset({"tune"})


def cells_of(view, session: str, first_of_gen: bool, long_wait: str | None = None) -> tuple:
    """The row's (text, style) cells, then whether its title is cut from the left."""
    r = view.record
    st = status_text(view, long_wait)
    kind = st.split(" ")[0].rstrip("*")
    sp = view.status.speedup
    return ((f"g{r.generation}" if first_of_gen else "", Style(bold=True)), (short(r.id, session), None),
            (r.operator, None), (" ".join(short(p, session) for p in r.parents) or "root", Style(color="cyan")),
            (st, STYLES.get(kind, STYLES["other"])), (f"{sp:.3f}x" if sp is not None else "-", None),
            (r.subject.split(" · ", 2)[-1], None), r.operator in CUT_LEFT_OPERATORS)


def strip_of(cells, widths, base: Style | None = None, cut_left_last: bool = False) -> Strip:
    segs = []
    last = len(widths) - 1
    for i, ((text, style), w) in enumerate(zip(cells, widths)):
        if len(text) <= w:
            t = text
        elif i == last and cut_left_last:
            t = "…" + text[len(text) - w + 1:]
        else:
            t = text[: w - 1] + "…"
        st = (base + style) if (base and style) else (style or base)
        segs.append(Segment(" " + t.ljust(w) + " ", st))
    return Strip(segs, sum(w + 2 for w in widths))


class LineageTable(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    LineageTable { height: 1fr; }
    LineageTable.-small { height: 6; }
    LineageTable > .lineage--header { text-style: bold; background: $panel; }
    LineageTable > .lineage--cursor { background: $accent; color: $text; }
    LineageTable:blur > .lineage--cursor { background: $accent 40%; }
    """
    COMPONENT_CLASSES = {"lineage--header", "lineage--cursor"}
    BINDINGS = [Binding("down", "cursor_down", show=False), Binding("up", "cursor_up", show=False),
                Binding("pagedown", "page_down", show=False), Binding("pageup", "page_up", show=False),
                Binding("home", "first", show=False), Binding("end", "last", show=False),
                Binding("enter", "select", show=False)]

    cursor_row: reactive[int] = reactive(0, always_update=False, repaint=False)

    class Highlighted(Message):
        def __init__(self, table: "LineageTable", row: int) -> None:
            super().__init__()
            self.table, self.row = table, row

    class Selected(Message):
        def __init__(self, table: "LineageTable", row: int) -> None:
            super().__init__()
            self.table, self.row = table, row

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.session = ""
        self.views: list = []
        self._first: set[int] = set()
        self._cache: dict[int, tuple] = {}
        self.long_waits: dict[str, str] = {}   # candidate id -> what its build waits on (LongWait events)
        self.widths = [w for _, w in COLUMNS]

    @property
    def row_count(self) -> int:
        return len(self.views)

    def load(self, data, keep: str | None = None) -> None:
        """Show `data` (a SessionData); the cursor stays on `keep` when it is still there."""
        self.session = data.name
        self.views = data.views
        self._first = set(data.gen_first.values())
        self._cache.clear()
        sample = data.views[:2000] + data.views[-2000:]
        # id, parents and status as wide as their longest (within bounds), so the title gets the rest
        self.widths[1] = max([9] + [len(short(v.record.id, data.name)) for v in sample])
        self.widths[3] = min(18, max([7] + [len(" ".join(short(p, data.name) for p in v.record.parents))
                                            for v in sample]))
        self.widths[4] = min(22, max([6] + [len(status_text(v, self.long_waits.get(v.record.id))) for v in sample]))
        self.virtual_size = Size(1, len(self.views) + 1)   # the title column takes what is left: no x-scroll
        row = data.index.get(keep, self.cursor_row) if keep else self.cursor_row
        self.move_cursor(row=min(max(0, row), max(0, len(self.views) - 1)))
        self.refresh()

    def set_long_waits(self, waits: dict[str, str]) -> None:
        """The candidates whose builds said they wait long (their rows read "compiling")."""
        if waits != self.long_waits:
            self.long_waits = dict(waits)
            self.widths[4] = max(self.widths[4], *(len(status_text(v, waits.get(v.record.id))) for v in self.views
                                                   if v.record.id in waits), 6)
            self._cache.clear()
            self.refresh()

    def move_cursor(self, row: int, animate: bool = False) -> None:
        if not self.views:
            return
        row = min(max(0, row), len(self.views) - 1)
        old = self.cursor_row
        self.cursor_row = row
        self._scroll_to_cursor()
        if old != row:
            self.refresh()
        self.post_message(self.Highlighted(self, row))

    def _scroll_to_cursor(self) -> None:
        body = max(1, self.scrollable_content_region.height - 1)
        y = self.scroll_y
        if self.cursor_row < y:
            y = self.cursor_row
        elif self.cursor_row >= y + body:
            y = self.cursor_row - body + 1
        if y != self.scroll_y:
            self.scroll_to(y=y, animate=False, immediate=True)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        self.widths[-1] = max(10, width - sum(w + 2 for w in self.widths[:-1]) - 2)
        sx = 0
        if y == 0:
            header = strip_of([(name, None) for name, _ in COLUMNS], self.widths,
                              self.get_component_rich_style("lineage--header"))
            return header.crop(sx, sx + width).extend_cell_length(width, self.get_component_rich_style("lineage--header"))
        i = int(self.scroll_y) + y - 1
        if i >= len(self.views):
            return Strip.blank(width, self.rich_style)
        cells = self._cache.get(i)
        if cells is None:
            view = self.views[i]
            cells = self._cache[i] = cells_of(view, self.session, i in self._first,
                                              self.long_waits.get(view.record.id))
            if len(self._cache) > 4000:
                self._cache.clear()
        base = self.get_component_rich_style("lineage--cursor") if i == self.cursor_row else self.rich_style
        return strip_of(cells[:-1], self.widths, base, cells[-1]).crop(sx, sx + width).extend_cell_length(width, base)

    def on_resize(self) -> None:
        self._scroll_to_cursor()

    def action_cursor_down(self) -> None:
        self.move_cursor(self.cursor_row + 1)

    def action_cursor_up(self) -> None:
        self.move_cursor(self.cursor_row - 1)

    def action_page_down(self) -> None:
        self.move_cursor(self.cursor_row + max(1, self.scrollable_content_region.height - 2))

    def action_page_up(self) -> None:
        self.move_cursor(self.cursor_row - max(1, self.scrollable_content_region.height - 2))

    def action_first(self) -> None:
        self.move_cursor(0)

    def action_last(self) -> None:
        self.move_cursor(len(self.views) - 1)

    def action_select(self) -> None:
        if self.views:
            self.post_message(self.Selected(self, self.cursor_row))

    def on_click(self, event) -> None:
        row = int(self.scroll_y) + event.y - 1
        if 0 <= row < len(self.views):
            if row == self.cursor_row and event.chain >= 2:
                self.action_select()
            self.move_cursor(row)
