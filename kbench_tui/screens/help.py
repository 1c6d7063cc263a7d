"""`?`: every binding with its id (remap any of them in the config file's [keys] section)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from kbench_tui import keymap


class HelpScreen(ModalScreen[None]):
    BINDINGS = keymap.bindings("help")

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box", classes="modal-box"):
            yield Static("[b]kbench keys[/b]  — remap any id in ~/.config/kbench/config.toml under \\[keys], "
                         "e.g.  \"session.pause\" = \"P\";  ctrl+p opens the command palette", id="help-title")
            yield DataTable(id="help-table", cursor_type="row")

    def on_mount(self) -> None:
        t = self.query_one(DataTable)
        t.add_columns("key", "what", "binding id")
        km = getattr(self.app, "keymap_overrides", {})
        for bid, key, desc in keymap.effective_keys(km):
            t.add_row(key.replace("left_square_bracket", "[").replace("right_square_bracket", "]")
                      .replace("question_mark", "?").replace("slash", "/"), desc, bid)
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
