"""Parsed listings kept on disk, so a fresh process lists a big session without parsing it all again.

A listing (Workspace.candidates) turns every candidate commit into a CandidateRecord and every note blob
into a folded CandidateStatus. Both are keyed by git object id, and git objects never change, so a parsed
entry stays true forever: the file only saves work, it can never be stale in a way that matters (entries
for objects that no longer exist are simply never asked for). It lives in the git directory
(`.git/kbench-listing.pickle`): derived data that is neither committed nor cloned; delete it at will.

It is a pickle of kbench's own dataclasses, read only from the workspace's own git directory; whoever can
write there can already run code through git's config. A file written by another version of the record
code (its source digest differs) or one that does not load is ignored and replaced.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import threading
import uuid
from pathlib import Path
from typing import Any

from engine.workspace import commits, naming, note_entries, note_parsing, records, views

FILENAME = "kbench-listing.pickle"
MIN_NEW_TO_SAVE = 256        # fewer newly parsed objects than this since the last save: not rewritten

_digest_cache: list[str] = []


def code_digest() -> str:
    """A digest of the modules whose classes are pickled: a change there invalidates old files."""
    if not _digest_cache:
        h = hashlib.sha256()
        for mod in (records, naming, note_entries, note_parsing, views, commits):
            h.update(Path(mod.__file__).read_bytes())
        _digest_cache.append(h.hexdigest()[:16])
    return _digest_cache[0]


def load(git_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(records by commit sha, statuses by note blob sha); empty when there is no usable file."""
    path = Path(git_dir) / FILENAME
    try:
        with open(path, "rb") as f:
            data = pickle.load(f)
        if data.get("digest") != code_digest():
            return {}, {}
        return dict(data["records"]), dict(data["statuses"])
    except Exception:  # noqa: BLE001 - missing, damaged or foreign: only a lost speed-up
        return {}, {}


def problem(git_dir: Path) -> str | None:
    """Why the file on disk would be ignored (None: it loads and matches this version)."""
    path = Path(git_dir) / FILENAME
    try:
        with open(path, "rb") as f:
            data = pickle.load(f)
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - any failure to load is the answer
        return f"does not load ({type(exc).__name__})"
    if not isinstance(data, dict) or not {"records", "statuses"} <= data.keys():
        return "is not a listing cache"
    if data.get("digest") != code_digest():
        return "was written by another version of kbench"
    return None


def save(git_dir: Path, records: dict[str, Any], statuses: dict[str, Any]) -> None:
    """Write atomically (temp file + rename): a reader sees the old file or the new one, never half."""
    path = Path(git_dir) / FILENAME
    tmp = path.with_name(f".{FILENAME}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as f:
            pickle.dump({"digest": code_digest(), "records": records, "statuses": statuses}, f,
                        protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


class ListingCache:
    """Loaded once per Workspace (its first listing); saved when the Workspace closes, if listings since
    parsed enough new objects. Saving at close, not after each listing, keeps the pickling (about half a
    second of held interpreter lock at 10,000 candidates) out of an interactive session."""

    def __init__(self, git_dir: Path):
        self.git_dir = Path(git_dir)
        self.loaded = False
        self.new_entries = 0
        self._lock = threading.Lock()

    def load_once(self) -> tuple[dict[str, Any], dict[str, Any]] | None:
        with self._lock:
            if self.loaded:
                return None
            self.loaded = True
        return load(self.git_dir)

    def parsed(self, n: int) -> None:
        with self._lock:
            self.new_entries += n

    def save_if_worthwhile(self, records: dict[str, Any], statuses: dict[str, Any]) -> bool:
        with self._lock:
            if self.new_entries < MIN_NEW_TO_SAVE:
                return False
            self.new_entries = 0
        save(self.git_dir, records, statuses)
        return True
