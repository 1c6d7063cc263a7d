"""Reading a note back: the lines of a `refs/notes/kbench` blob into note entries, one note at a time
(`parse_note`) or many at once for listings (`parse_notes_bulk`).

A line that does not start with `{` (someone ran `git notes --ref kbench append -m "looks fine"`) is a
comment; a line that starts with `{` and does not parse, or lacks a field its kind needs, is a corrupt note
and reading it raises `CorruptNoteError`, naming the line and how to fix it. Unknown kinds (written by a
later kbench) are kept as `UnknownEntry`.
"""

from __future__ import annotations

import json
from typing import Any

from engine.verdict import Verdict
from engine.workspace.errors import CorruptNoteError
from engine.workspace.note_entries import (Comment, Event, Measurement, NoteEntry, Override, UnknownEntry,
                                           VerdictNote, status_of)
from engine.workspace.records import make


def parse_note(text: str, where: str = "", commit: str = "", skip_bad: bool = False) -> list[NoteEntry]:
    """Parse one note blob. `where` names the candidate and `commit` the annotated commit in errors.
    `skip_bad`: leave out lines that do not parse instead of raising (they stay in the note itself)."""
    entries: list[NoteEntry] = []
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue  # `git notes append` separates paragraphs with a blank line
        if not line.startswith("{"):
            entries.append(Comment(line))
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            entries.append(_entry_from_obj(obj))
        except (ValueError, KeyError, TypeError) as exc:
            if skip_bad:
                continue
            shown = line if len(line) <= 90 else line[:87] + "..."
            raise CorruptNoteError(
                f"{where or 'a candidate'}: line {i} of its refs/notes/kbench note cannot be read "
                f"({type(exc).__name__}: {exc}): {shown}  -- nothing was changed; fix or delete the line with "
                f"`git notes --ref kbench edit {commit or '<commit>'}`.") from None
    return entries


def parse_notes_bulk(texts: dict[str, str]) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """Decode many notes at once, for listings: {key: [line objects]} for the notes whose every line is
    a JSON object (one C-level `json.loads` for all of them; `views.fold_objs` folds them), and the keys
    left for `parse_note` (comment lines, or anything the fast path cannot vouch for)."""
    fast: list[tuple[str, int]] = []
    parts: list[str] = []
    slow: list[str] = []
    for commit, text in texts.items():
        body = text.strip()
        if not body:
            fast.append((commit, 0))
            parts.append("[]")
            continue
        n = body.count("\n") + 1
        # Cheap C-level checks that every line is `{...}` (no blank, indented or comment lines).
        if (body[0] == "{" and body[-1] == "}" and body.count("\n{") == n - 1 and body.count("}\n") == n - 1
                and "\r" not in body):
            fast.append((commit, n))
            parts.append("[" + body.replace("\n", ",") + "]")
        else:
            slow.append(commit)
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        arrays = json.loads("[" + ",".join(parts) + "]")
    except ValueError:
        return out, slow + [c for c, _ in fast]
    if len(arrays) != len(fast):
        return out, slow + [c for c, _ in fast]
    for (commit, count), arr in zip(fast, arrays):
        if len(arr) == count and all(type(o) is dict for o in arr):
            out[commit] = arr
        else:
            slow.append(commit)  # parse_note will name the line
    return out, slow


def verdict_from_obj(obj: dict[str, Any]) -> VerdictNote:
    stage = obj["stage"]
    if type(stage) is not str:
        raise ValueError("stage is not a string")
    verdict = make(Verdict, stage=stage, status=status_of(obj["status"]), reason=str(obj.get("reason", "")),
                   data=dict(obj.get("data") or {}))
    return make(VerdictNote, verdict=verdict, at=str(obj.get("at", "")), by=str(obj.get("by", "")))


def override_from_obj(obj: dict[str, Any]) -> Override:
    frm = obj.get("from")
    return make(Override, stage=str(obj["stage"]), from_status=None if frm is None else str(frm),
                to_status=status_of(obj["to"]), by=str(obj.get("by", "")), reason=str(obj.get("reason", "")),
                at=str(obj.get("at", "")))


def event_from_obj(obj: dict[str, Any]) -> Event:
    return make(Event, event=str(obj["event"]), data=dict(obj.get("data") or {}), at=str(obj.get("at", "")),
                by=str(obj.get("by", "")))


def _entry_from_obj(obj: dict[str, Any]) -> NoteEntry:
    kind = obj.get("kind")
    if kind == "verdict":
        return verdict_from_obj(obj)
    if kind == "measurement":
        return Measurement.from_obj(obj)
    if kind == "override":
        return override_from_obj(obj)
    if kind == "event":
        return event_from_obj(obj)
    if not isinstance(kind, str) or not kind:
        raise ValueError("no 'kind'")
    return UnknownEntry(obj)
