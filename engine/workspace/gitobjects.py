"""Git's object formats, in pure Python: tree entries, commits and identities (parse and serialise), and
the in-process loose-object writer (gitdb: temp file + rename, so a killed writer leaves no torn object).
Nothing here runs git; `gitio` does that."""

from __future__ import annotations

import time
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Iterable, Sequence

from gitdb import IStream, LooseObjectDB

from engine.workspace.errors import WorkspaceError

# ----------------------------------------------------------------------------------------------- trees

MODE_BLOB, MODE_EXEC, MODE_TREE = "100644", "100755", "40000"


@dataclass(frozen=True)
class TreeEntry:
    mode: str
    name: str
    sha: str  # hex

    @property
    def is_tree(self) -> bool:
        return self.mode in ("40000", "040000")


def parse_tree(data: bytes) -> list[TreeEntry]:
    entries, pos, n = [], 0, len(data)
    while pos < n:
        sp = data.index(b" ", pos)
        nul = data.index(b"\0", sp)
        entries.append(TreeEntry(data[pos:sp].decode(), data[sp + 1:nul].decode("utf-8", "surrogateescape"),
                                 data[nul + 1:nul + 21].hex()))
        pos = nul + 21
    return entries


def _tree_sort_key(e: TreeEntry) -> bytes:
    name = e.name.encode("utf-8", "surrogateescape")
    return name + b"/" if e.is_tree else name


def serialize_tree(entries: Iterable[TreeEntry]) -> bytes:
    out = bytearray()
    seen = set()
    for e in sorted(entries, key=_tree_sort_key):
        if e.name in seen:
            raise WorkspaceError(f"two tree entries named {e.name!r}")
        seen.add(e.name)
        mode = "40000" if e.is_tree else e.mode
        out += mode.encode() + b" " + e.name.encode("utf-8", "surrogateescape") + b"\0" + bytes.fromhex(e.sha)
    return bytes(out)


class ObjectWriter:
    """Writes loose objects in-process. gitdb writes each to a temp file and renames it into place, so an
    object either exists whole or not at all; concurrent writers of the same object are harmless."""

    def __init__(self, git_dir: Path):
        self._db = LooseObjectDB(str(git_dir / "objects"))

    def write(self, type_: str, data: bytes) -> str:
        istream = self._db.store(IStream(type_.encode(), len(data), BytesIO(data)))
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


# --------------------------------------------------------------------------------------------- commits


@dataclass(frozen=True)
class Ident:
    name: str
    email: str
    when: int
    tz: str = "+0000"

    def format(self) -> str:
        clean = lambda s: s.replace("<", "").replace(">", "").replace("\n", " ").strip() or "unknown"
        return f"{clean(self.name)} <{clean(self.email)}> {self.when} {self.tz}"

    @classmethod
    def now(cls, name: str, email: str) -> "Ident":
        now = time.time()
        off = time.localtime(now).tm_gmtoff // 60
        sign = "-" if off < 0 else "+"
        return cls(name, email, int(now), f"{sign}{abs(off) // 60:02d}{abs(off) % 60:02d}")

    @classmethod
    def parse(cls, text: str) -> "Ident":
        lt, gt = text.find("<"), text.rfind(">")
        if lt < 0 or gt < lt:
            return cls(text.strip(), "", 0)
        name, email = text[:lt].strip(), text[lt + 1:gt]
        rest = text[gt + 1:].split()
        when = int(rest[0]) if rest and rest[0].lstrip("-").isdigit() else 0
        return cls(name, email, when, rest[1] if len(rest) > 1 else "+0000")


@dataclass(frozen=True)
class RawCommit:
    sha: str
    tree: str
    parents: tuple[str, ...]
    author: Ident
    committer_line: str
    message: str

    @property
    def committer(self) -> Ident:
        return Ident.parse(self.committer_line) if self.committer_line else self.author


def parse_commit(sha: str, data: bytes) -> RawCommit:
    head, _, message = data.partition(b"\n\n")
    tree, parents, author, committer = "", [], None, ""
    for line in head.split(b"\n"):
        key, _, value = line.partition(b" ")
        if key == b"tree":
            tree = value.decode()
        elif key == b"parent":
            parents.append(value.decode())
        elif key == b"author":
            author = Ident.parse(value.decode("utf-8", "replace"))
        elif key == b"committer":
            committer = value.decode("utf-8", "replace")
    return RawCommit(sha, tree, tuple(parents), author or Ident("", "", 0), committer,
                     message.decode("utf-8", "replace"))


def format_commit(tree: str, parents: Sequence[str], author: Ident, committer: Ident, message: str) -> bytes:
    lines = [f"tree {tree}"] + [f"parent {p}" for p in parents]
    lines += [f"author {author.format()}", f"committer {committer.format()}"]
    if not message.endswith("\n"):
        message += "\n"
    return ("\n".join(lines) + "\n\n" + message).encode()
