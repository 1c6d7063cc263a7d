"""Home: the workspace's sessions (task, direction, generation, best speedup, status) and the tasks to start
from. enter opens a session (or starts one from a task), n starts a new session, / finds a session or task by
name (the command palette, ctrl+p, finds commands, not tasks)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Static

from kbench_tui import keymap
from kbench_tui.view_models import SessionRow, TaskRow
from kbench_tui.workers import Done, ThreadedMixin


class SessionsListed(Done[list[SessionRow]]):
    """The workspace's sessions, a row each."""


class TasksListed(Done[list[TaskRow]]):
    """The tasks to start from: built-in, then the user's."""


def fill(table: DataTable, columns: tuple[str, ...], rows: list[tuple[str, ...]], style: dict | None = None,
         keys: list[str] | None = None) -> None:
    """Replace the table's rows; column widths are set from the cells (a DataTable left to size its own
    columns does it on idle, which a busy machine can postpone past the first paint). A row's key is its
    first cell unless `keys` gives them."""
    table.clear(columns=True)
    for i, name in enumerate(columns):
        table.add_column(name, width=max([len(name)] + [len(r[i]) for r in rows]), key=name)
    for n, r in enumerate(rows):
        cells = [Text(v, style=style[i](v)) if style and i in style else v for i, v in enumerate(r)]
        table.add_row(*cells, key=keys[n] if keys else r[0])


class HomeScreen(ThreadedMixin, Screen):
    BINDINGS = keymap.bindings("home", "list")

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="notices", classes="notices")
        yield Static(Text("Sessions", style="bold"), classes="section")
        yield DataTable(id="sessions", cursor_type="row")
        yield Static("", id="damage", classes="notices")
        yield Static(Text("Tasks (enter: new session)", style="bold"), classes="section")
        yield DataTable(id="tasks", cursor_type="row")
        yield Input(placeholder="find a session or task: name, task, tag (enter: go there, esc: close)",
                    id="home-search")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.app.sub_title = self.app.workspace_label()
        notices = [n for n in (self.app.backend.gpu_notice(), self.app.backend.llm_notice(),
                               self.app.backend.config_error, *self.app.keymap_problems) if n]
        self.query_one("#notices", Static).update(Text("\n".join(notices), style="yellow"))
        self.query_one("#notices").display = bool(notices)
        self.query_one("#home-search").display = False
        self.query_one("#damage").display = False
        self.action_refresh()
        self.background(self.app.backend.tasks, done=TasksListed, what="tasks")

    def on_screen_resume(self) -> None:
        self.app.sub_title = self.app.workspace_label()
        self.action_refresh()

    def action_refresh(self) -> None:
        # with generations: lists every session's candidates off the UI thread, which also warms the
        # workspace's caches so opening a session afterwards reads only what changed
        self.background(self.app.backend.sessions, self.app.prefetch_generations, done=SessionsListed,
                        what="sessions", exclusive=True)

    def on_sessions_listed(self, message: SessionsListed) -> None:
        rows = message.value
        t = self.query_one("#sessions", DataTable)
        cur = t.cursor_row
        cells = []
        for r in rows:
            sp = f"{r.best_speedup:.3f}x" if r.best_speedup is not None else "-"
            cells.append((r.name, r.task, r.direction, r.proposer, str(r.candidates),
                          "-" if r.generation is None else str(r.generation), r.best or "-", sp, r.status))
        fill(t, ("session", "task", "direction", "proposer", "candidates", "gen", "best", "speedup", "status"), cells,
             style={8: lambda v: {"running": "bold green", "paused": "yellow"}.get(
                 v, "cyan" if v.startswith("waiting") else "bold red" if v.startswith("damaged") else "dim")})
        damaged = [f"{r.name}: {r.damage}" for r in rows if r.damage]
        note = self.query_one("#damage", Static)
        note.update(Text("\n".join(damaged), style="red"))
        note.display = bool(damaged)
        if rows:
            t.move_cursor(row=min(cur, len(rows) - 1))
        if not rows:
            self.query_one("#tasks", DataTable).focus()
        self.sessions_loaded = len(rows)

    def on_tasks_listed(self, message: TasksListed) -> None:
        rows = message.value
        fill(self.query_one("#tasks", DataTable), ("task", "directions", "configs", "tags"),
             [(r.name, "+".join(r.directions) or "broken", str(r.configs),
               ((r.tags or r.error[:60]) + (f"  ($KBENCH_TASKS: {r.folder})" if r.folder else "")).strip())
              for r in rows],
             keys=[r.key for r in rows])
        self.tasks_loaded = True

    def _focused_table(self) -> DataTable:
        f = self.focused
        return f if isinstance(f, DataTable) else self.query_one("#sessions", DataTable)

    def action_cursor_down(self) -> None:
        self._focused_table().action_cursor_down()

    def action_cursor_up(self) -> None:
        self._focused_table().action_cursor_up()

    def action_switch_table(self) -> None:
        other = "#tasks" if self._focused_table().id == "sessions" else "#sessions"
        self.query_one(other, DataTable).focus()

    # -- / : find a session or a task
    def action_search(self) -> None:
        s = self.query_one("#home-search", Input)
        if not s.display:
            self._search_table = self._focused_table()
        s.display = True
        s.value = ""
        s.focus()

    def action_close_search(self) -> None:
        s = self.query_one("#home-search", Input)
        if s.display:
            s.display = False
            self._focused_table_before_search().focus()

    def _focused_table_before_search(self) -> DataTable:
        """The table the search went to last (or the one focused when it opened)."""
        return getattr(self, "_search_table", None) or self.query_one("#sessions", DataTable)

    def _matches(self, query: str) -> list[tuple[DataTable, int]]:
        """(table, row) of every session, then every task, whose cells contain `query` (any case)."""
        q = query.strip().lower()
        out = []
        for tid in ("#sessions", "#tasks"):
            t = self.query_one(tid, DataTable)
            for row in range(t.row_count):
                if q and any(q in str(cell).lower() for cell in t.get_row_at(row)):
                    out.append((t, row))
        return out

    def _go(self, table: DataTable, row: int) -> None:
        table.move_cursor(row=row, animate=False)
        self._search_table = table

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "home-search":
            found = self._matches(event.value)
            if found:
                self._go(*found[0])

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "home-search":
            return
        found = self._matches(event.value)
        if not found:
            self.app.notify(f"no session or task matches {event.value.strip()!r}", severity="warning")
            return
        self.action_close_search()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self._open(event.data_table, event.row_key.value)

    def action_open(self) -> None:
        t = self._focused_table()
        if t.row_count:
            key = t.coordinate_to_cell_key((t.cursor_row, 0)).row_key.value
            self._open(t, key)

    def _open(self, table: DataTable, key: str | None) -> None:
        if not key:
            return
        if table.id == "sessions":
            self.app.open_session(key)
        else:
            self.app.new_session(task=key)

    def action_new_session(self) -> None:
        t = self.query_one("#tasks", DataTable)
        task = t.coordinate_to_cell_key((t.cursor_row, 0)).row_key.value if t.row_count else None
        self.app.new_session(task=task)
