"""`?`: the keys, grouped by screen (the one it was opened on first), each with one line on what it does and its
binding id (remap any of them in the config file's [keys] section)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from kbench_tui import keymap

# the help scope of each screen, by class name (the help screen must not import the screens)
SCREEN_SCOPES = {"HomeScreen": "home", "NewSessionScreen": "new", "SessionScreen": "session",
                 "CandidateScreen": "candidate", "OverrideScreen": "modal", "ExportScreen": "modal"}


KEY_W, WHAT_W, ID_W = 12, 56, 20     # the help box is 100 wide: every line of keymap's help fits


class HelpScreen(ModalScreen[None]):
    BINDINGS = keymap.bindings("help")

    def __init__(self, opened_on: str | None = None):
        super().__init__()
        self.opened_on = opened_on          # the class name of the screen below

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box", classes="modal-box"):
            yield Static("[b]kbench keys[/b], by screen. Remap one by its id in ~/.config/kbench/config.toml under "
                         "\\[keys], e.g.  \"session.pause\" = \"P\";  ctrl+p opens the command palette",
                         id="help-title")
            yield DataTable(id="help-table", cursor_type="row")

    def on_mount(self) -> None:
        t = self.query_one(DataTable)
        for name, width in (("key", KEY_W), ("what it does", WHAT_W), ("id", ID_W)):
            t.add_column(name, width=width)
        km = getattr(self.app, "keymap_overrides", {})
        for title, rows in keymap.help_sections(km, SCREEN_SCOPES.get(self.opened_on or "")):
            t.add_row("", Text(title, style="bold underline"), "", key=f"section:{title}")
            for key, what, bid in rows:
                t.add_row(Text(key, style="bold"), what, Text(bid, style="dim"), key=bid)
        t.move_cursor(row=1)
        t.focus()

    def action_close(self) -> None:
        self.dismiss(None)

    # j/k, home/g and end/G as in every list of the app (pageup/pagedown and the mouse wheel are the table's)
    def action_cursor_down(self) -> None:
        self.query_one(DataTable).action_cursor_down()

    def action_cursor_up(self) -> None:
        self.query_one(DataTable).action_cursor_up()

    def action_top(self) -> None:
        self.query_one(DataTable).move_cursor(row=0)

    def action_bottom(self) -> None:
        t = self.query_one(DataTable)
        t.move_cursor(row=max(0, t.row_count - 1))
