"""Git's object formats, in pure Python: tree entries, commits and identities (parse and serialise).
Nothing here touches the repository: `gitread` reads objects, `gitwrite` writes them (see `gitio`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable, Sequence

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
