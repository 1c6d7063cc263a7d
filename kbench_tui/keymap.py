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
    description: str         # the footer's word or two
    help: str = ""           # what it does, in one line (the help screen)
    show: bool = True        # shown in the footer
    priority: bool = False


# scope -> (its title on the help screen, its specs). The id's prefix is its scope.
SCOPES: dict[str, str] = {
    "app": "Everywhere",
    "list": "Lists (home, session)",
    "home": "Home: sessions and tasks",
    "new": "New session form",
    "session": "Session: candidates by generation",
    "failed": "Failed proposals: answers that gave no candidate",
    "candidate": "Candidate: code, diff, verdicts, profile, prompt",
    "modal": "Override and export forms",
    "help": "This help",
}

SPECS: dict[str, tuple[KeySpec, ...]] = {
    "app": (
        KeySpec("app.quit", "q", "quit", "Quit", "leave the app (a running evolution stops, resumable)"),
        KeySpec("app.help", "question_mark", "help", "Help", "these keys, grouped by screen"),
    ),
    "list": (
        KeySpec("list.down", "j", "cursor_down", "Down", "next row", show=False),
        KeySpec("list.up", "k", "cursor_up", "Up", "previous row", show=False),
        KeySpec("list.search", "slash", "search", "Search",
                "find a session or task (home), a candidate (session)", show=False),
    ),
    "home": (
        KeySpec("home.open", "enter", "open", "Open", "open the session, or start one from the task"),
        KeySpec("home.new", "n", "new_session", "New session", "the new-session form, on the task under the cursor"),
        KeySpec("home.refresh", "r", "refresh", "Refresh", "read the workspace's sessions again", show=False),
        KeySpec("home.focus_tasks", "tab", "switch_table", "Sessions/tasks",
                "move between the sessions and the tasks", show=False),
        KeySpec("home.close_search", "escape", "close_search", "Close search", "close the search field",
                show=False),
    ),
    "new": (
        KeySpec("new.start", "ctrl+s", "start", "Start", "create the session and start its evolution"),
        KeySpec("new.cancel", "escape", "cancel", "Cancel", "back to the home screen; nothing is created"),
    ),
    "session": (
        KeySpec("session.back", "escape", "back", "Back", "back to the home screen (an evolution keeps running)"),
        KeySpec("session.open", "enter", "open", "Detail", "the candidate under the cursor: code, diff, verdicts",
                show=False),
        KeySpec("session.prev_gen", "left_square_bracket", "prev_generation", "Prev gen",
                "first candidate of the previous generation", show=False),
        KeySpec("session.next_gen", "right_square_bracket", "next_generation", "Next gen",
                "first candidate of the next generation", show=False),
        KeySpec("session.parent", "p", "goto_parent", "Parent", "the candidate's (first) parent", show=False),
        KeySpec("session.pause", "space", "toggle_pause", "Pause",
                "pause the evolution (evaluations finish), or resume it"),
        KeySpec("session.step", "s", "step", "Step", "while paused: one more proposal, then pause again"),
        KeySpec("session.stop", "x", "stop", "Stop", "stop the evolution; running evaluations are recorded"),
        KeySpec("session.run", "R", "run", "Run", "run or resume the session's evolution in this app", show=False),
        KeySpec("session.mark", "m", "mark", "Mark", "mark the candidate: d then diffs against it", show=False),
        KeySpec("session.diff", "d", "diff", "Diff", "diff against the parent, or the marked candidate"),
        KeySpec("session.override", "o", "override", "Override", "overrule a verdict, with a reason (recorded)"),
        KeySpec("session.reevaluate", "e", "reevaluate", "Re-eval", "evaluate the candidate again on this machine"),
        KeySpec("session.edit", "E", "edit", "Edit", "edit the candidate in $EDITOR: a new human candidate",
                show=False),
        KeySpec("session.export", "X", "export", "Export", "write a torch extension package of the candidate"),
        KeySpec("session.log", "l", "toggle_log", "Log",
                "log pane: larger (scrollable), hidden, back to normal", show=False),
        KeySpec("session.failed", "F", "failed", "Failed", "the LLM answers that gave no candidate, kept whole",
                show=False),
    ),
    "failed": (
        KeySpec("failed.back", "escape", "back", "Back", "back to the session"),
    ),
    "candidate": (
        KeySpec("candidate.back", "escape", "back", "Back", "back to the session"),
        KeySpec("candidate.next_tab", "right,L", "next_tab", "Next tab", "the next tab", show=False),
        KeySpec("candidate.prev_tab", "left,H", "prev_tab", "Prev tab", "the previous tab", show=False),
        KeySpec("candidate.code", "c", "tab('code')", "Code", "its files", show=False),
        KeySpec("candidate.diff", "d", "tab('diff')", "Diff", "diff against its parent (or the marked candidate)"),
        KeySpec("candidate.verdicts", "v", "tab('verdicts')", "Verdicts",
                "every verdict, override and measurement", show=False),
        KeySpec("candidate.profile", "f", "tab('profile')", "Profile", "profile summary and timed configs",
                show=False),
        KeySpec("candidate.prompt", "t", "tab('prompt')", "Prompt", "what the proposer was asked and answered",
                show=False),
        KeySpec("candidate.override", "o", "override", "Override", "overrule a verdict, with a reason (recorded)"),
        KeySpec("candidate.reevaluate", "e", "reevaluate", "Re-eval", "evaluate it again on this machine"),
        KeySpec("candidate.edit", "E", "edit", "Edit", "edit it in $EDITOR: a new human candidate"),
        KeySpec("candidate.export", "X", "export", "Export", "write a torch extension package of it"),
        KeySpec("candidate.down", "j", "scroll_down", "Down", "scroll down", show=False),
        KeySpec("candidate.up", "k", "scroll_up", "Up", "scroll up", show=False),
    ),
    "modal": (
        KeySpec("modal.cancel", "escape", "cancel", "Cancel", "close the form; nothing is written"),
        KeySpec("modal.confirm", "ctrl+s", "confirm", "Confirm", "do it (enter in a text field too)"),
    ),
    "help": (
        KeySpec("help.close", "escape,q,question_mark", "close", "Close", "close this help"),
        KeySpec("help.down", "j", "cursor_down", "Down", "next row", show=False),
        KeySpec("help.up", "k", "cursor_up", "Up", "previous row", show=False),
        # priority: the focused table would take home/end for horizontal scrolling
        KeySpec("help.top", "home,g", "top", "Top", "first row", show=False, priority=True),
        KeySpec("help.bottom", "end,G", "bottom", "Bottom", "last row", show=False, priority=True),
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
    """(id, key, description) for every binding, after remapping."""
    return [(s.id, keymap.get(s.id, s.key), s.description) for s in all_specs()]


def key_label(key: str) -> str:
    """A key as the help screen shows it: `[` for left_square_bracket, `a, b` for "a,b"."""
    names = {"left_square_bracket": "[", "right_square_bracket": "]", "question_mark": "?", "slash": "/"}
    return ", ".join(names.get(k.strip(), k.strip()) for k in key.split(","))


def help_sections(keymap: Mapping[str, str], first: str | None = None) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(section title, [(key, what it does, binding id)]) per scope, after remapping; the scope `first` (the
    screen the help was opened on) leads, the others follow in their usual order."""
    order = ([first] if first in SPECS else []) + [s for s in SPECS if s != first]
    return [(SCOPES[scope], [(key_label(keymap.get(s.id, s.key)), s.help or s.description, s.id)
                             for s in SPECS[scope]]) for scope in order]
