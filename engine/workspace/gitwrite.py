"""Writing new objects into the workspace: loose objects written in-process through gitdb, the one thing
gitdb is kept for. Each object goes to a temp file renamed into place, so it exists whole or not at all
(a killed writer leaves no torn object), and writing a blob costs no git process. Part of the one git
access path (`gitio`); refs that make the objects reachable are moved by `gitrefs`."""

from __future__ import annotations

from io import BytesIO
from pathlib import Path
from typing import Iterable

from gitdb import IStream, LooseObjectDB

from engine.errors import storage_error
from engine.workspace.errors import WorkspaceError, WorkspaceStorageError
from engine.workspace.gitobjects import MODE_BLOB, MODE_TREE, TreeEntry, serialize_tree


class ObjectWriter:
    """Writes loose objects in-process. gitdb writes each to a temp file and renames it into place, so an
    object either exists whole or not at all; concurrent writers of the same object are harmless."""

    def __init__(self, git_dir: Path):
        self._db = LooseObjectDB(str(git_dir / "objects"))

    def write(self, type_: str, data: bytes) -> str:
        try:
            istream = self._db.store(IStream(type_.encode(), len(data), BytesIO(data)))
        except OSError as exc:   # a full or read-only disk: one line; the object is not there (no ref names it)
            failure = storage_error(exc, self._db.root_path())
            if failure is None:
                raise
            raise WorkspaceStorageError(str(failure)) from None
        return istream.hexsha.decode() if isinstance(istream.hexsha, bytes) else istream.hexsha

    def blob(self, data: bytes | str) -> str:
        return self.write("blob", data.encode() if isinstance(data, str) else data)

    def tree(self, entries: Iterable[TreeEntry]) -> str:
        return self.write("tree", serialize_tree(entries))

    def tree_from_files(self, files: dict[str, str | TreeEntry]) -> str:
        """Build nested trees from {path: blob sha or TreeEntry}. Paths use '/'."""
        top: dict[str, TreeEntry] = {}
        sub: dict[str, dict[str, str | TreeEntry]] = {}
        for path, item in files.items():
            head, sep, rest = path.partition("/")
            if sep:
                sub.setdefault(head, {})[rest] = item
            elif isinstance(item, TreeEntry):
                top[head] = TreeEntry(item.mode, head, item.sha)
            else:
                top[head] = TreeEntry(MODE_BLOB, head, item)
        for head, children in sub.items():
            if head in top:
                raise WorkspaceError(f"{head!r} is both a file and a folder")
            top[head] = TreeEntry(MODE_TREE, head, self.tree_from_files(children))
        return self.tree(top.values())
