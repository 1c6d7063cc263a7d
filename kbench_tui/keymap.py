"""Every key binding of the app, by id. Screens build their BINDINGS from here; the config file's `[keys]`
section (binding id -> key, e.g. `"session.pause" = "P"`) overrides the defaults through `App.set_keymap`.

Keys follow tig and lazygit: j/k move, enter drills in, esc goes back, d diffs, [ ] jump generations,
/ searches, ? helps, q quits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from textual.binding import Binding


@dataclass(frozen=True)
class KeySpec:
    id: str
    key: str                 # default key(s), comma-separated
    action: str
    description: str
    show: bool = True        # shown in the footer
    priority: bool = False


# scope -> specs. The id's prefix is its scope.
SPECS: dict[str, tuple[KeySpec, ...]] = {
    "app": (
        KeySpec("app.quit", "q", "quit", "Quit"),
        KeySpec("app.help", "question_mark", "help", "Help"),
    ),
    "list": (
        KeySpec("list.down", "j", "cursor_down", "Down", show=False),
        KeySpec("list.up", "k", "cursor_up", "Up", show=False),
        KeySpec("list.search", "slash", "search", "Search", show=False),
    ),
    "home": (
        KeySpec("home.open", "enter", "open", "Open"),
        KeySpec("home.new", "n", "new_session", "New session"),
        KeySpec("home.refresh", "r", "refresh", "Refresh", show=False),
        KeySpec("home.focus_tasks", "tab", "switch_table", "Sessions/tasks", show=False),
    ),
    "new": (
        KeySpec("new.start", "ctrl+s", "start", "Start"),
        KeySpec("new.cancel", "escape", "cancel", "Cancel"),
    ),
    "session": (
        KeySpec("session.back", "escape", "back", "Back"),
        KeySpec("session.open", "enter", "open", "Detail"),
        KeySpec("session.prev_gen", "left_square_bracket", "prev_generation", "Prev gen"),
        KeySpec("session.next_gen", "right_square_bracket", "next_generation", "Next gen"),
        KeySpec("session.parent", "p", "goto_parent", "Parent", show=False),
        KeySpec("session.pause", "space", "toggle_pause", "Pause/resume"),
        KeySpec("session.step", "s", "step", "Step"),
        KeySpec("session.stop", "x", "stop", "Stop"),
        KeySpec("session.run", "R", "run", "Run/resume evolution", show=False),
        KeySpec("session.mark", "m", "mark", "Mark for diff"),
        KeySpec("session.diff", "d", "diff", "Diff"),
        KeySpec("session.override", "o", "override", "Override"),
        KeySpec("session.reevaluate", "e", "reevaluate", "Re-evaluate"),
        KeySpec("session.edit", "E", "edit", "Edit ($EDITOR)"),
        KeySpec("session.export", "X", "export", "Export"),
        KeySpec("session.log", "l", "toggle_log", "Log", show=False),
        KeySpec("session.failed", "F", "failed", "Failed proposals", show=False),
    ),
    "failed": (
        KeySpec("failed.back", "escape", "back", "Back"),
    ),
    "candidate": (
        KeySpec("candidate.back", "escape", "back", "Back"),
        KeySpec("candidate.next_tab", "right,L", "next_tab", "Next tab", show=False),
        KeySpec("candidate.prev_tab", "left,H", "prev_tab", "Prev tab", show=False),
        KeySpec("candidate.code", "c", "tab('code')", "Code", show=False),
        KeySpec("candidate.diff", "d", "tab('diff')", "Diff"),
        KeySpec("candidate.verdicts", "v", "tab('verdicts')", "Verdicts", show=False),
        KeySpec("candidate.profile", "f", "tab('profile')", "Profile", show=False),
        KeySpec("candidate.prompt", "t", "tab('prompt')", "Prompt", show=False),
        KeySpec("candidate.override", "o", "override", "Override"),
        KeySpec("candidate.reevaluate", "e", "reevaluate", "Re-evaluate"),
        KeySpec("candidate.edit", "E", "edit", "Edit"),
        KeySpec("candidate.export", "X", "export", "Export"),
        KeySpec("candidate.down", "j", "scroll_down", "Down", show=False),
        KeySpec("candidate.up", "k", "scroll_up", "Up", show=False),
    ),
    "modal": (
        KeySpec("modal.cancel", "escape", "cancel", "Cancel"),
        KeySpec("modal.confirm", "ctrl+s", "confirm", "Confirm"),
    ),
    "help": (
        KeySpec("help.close", "escape,q,question_mark", "close", "Close"),
        KeySpec("help.down", "j", "cursor_down", "Down", show=False),
        KeySpec("help.up", "k", "cursor_up", "Up", show=False),
        # priority: the focused table would take home/end for horizontal scrolling
        KeySpec("help.top", "home,g", "top", "Top", show=False, priority=True),
        KeySpec("help.bottom", "end,G", "bottom", "Bottom", show=False, priority=True),
    ),
}


def bindings(*scopes: str) -> list[Binding]:
    """Textual bindings, with ids, for the given scopes."""
    out = []
    for scope in scopes:
        for s in SPECS[scope]:
            out.append(Binding(s.key, s.action, s.description, show=s.show, priority=s.priority, id=s.id))
    return out


def all_specs() -> list[KeySpec]:
    return [s for specs in SPECS.values() for s in specs]


def keymap_from_config(keys: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The `[keys]` section -> (keymap for App.set_keymap, problems). Unknown ids are reported, not fatal."""
    known = {s.id for s in all_specs()}
    good, problems = {}, []
    for bid, key in keys.items():
        if bid not in known:
            problems.append(f"[keys] {bid!r} is not a binding id (see `?` for the list)")
        elif not isinstance(key, str) or not key.strip():
            problems.append(f"[keys] {bid!r}: give a key name")
        else:
            good[bid] = key.strip()
    return good, problems


def effective_keys(keymap: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(id, key, description) for every binding, after remapping: what the help screen lists."""
    return [(s.id, keymap.get(s.id, s.key), s.description) for s in all_specs()]
