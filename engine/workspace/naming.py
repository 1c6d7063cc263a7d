"""The workspace's names: its ref namespaces, the refs of a session and of a candidate, and candidate ids
(`<session>-g<generation>-<n>`), with the checks that keep a session name or a token usable inside a git
ref name. See docs/formats.md ("The workspace repository")."""

from __future__ import annotations

import re

from engine.workspace.errors import WorkspaceError

NOTES_REF = "refs/notes/kbench"
CANDIDATE_NS = "refs/kbench/"
BRANCH_NS = "refs/heads/sessions/"
ROOT_LEAF = "root"

_SESSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
CANDIDATE_ID_RE = re.compile(r"^(?P<session>.+)-g(?P<gen>\d+)-(?P<n>\d+)$")
_TOKEN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+/@-]{0,79}$")


def check_session_name(name: str) -> str:
    if (not isinstance(name, str) or not _SESSION_RE.match(name) or ".." in name or name.endswith(".lock")
            or name.endswith(".") or name == ROOT_LEAF):
        raise WorkspaceError(
            f"{name!r} is not a usable session name: use 1-63 letters, digits, '_', '.' or '-', starting with a "
            "letter or digit (it becomes part of git ref names and candidate ids).")
    return name


def check_token(kind: str, value: str) -> str:
    if not isinstance(value, str) or not _TOKEN_RE.match(value):
        raise WorkspaceError(f"{kind} {value!r} is not a single word (letters, digits, '_.:+/@-').")
    return value


def root_ref(session: str) -> str:
    return f"{CANDIDATE_NS}{session}/{ROOT_LEAF}"


def candidate_ref(session: str, cid: str) -> str:
    return f"{CANDIDATE_NS}{session}/{cid}"


def branch_ref(session: str) -> str:
    return f"{BRANCH_NS}{session}"


def candidate_id(session: str, generation: int, n: int) -> str:
    return f"{session}-g{generation}-{n}"


def parse_candidate_id(cid: str) -> tuple[str, int, int] | None:
    m = CANDIDATE_ID_RE.match(cid)
    if not m:
        return None
    return m["session"], int(m["gen"]), int(m["n"])


def split_ref(ref: str) -> tuple[str, str] | None:
    """`refs/kbench/<session>/<leaf>` -> (session, leaf); None for anything else."""
    if not ref.startswith(CANDIDATE_NS):
        return None
    session, sep, leaf = ref[len(CANDIDATE_NS):].partition("/")
    if not sep or not leaf or "/" in leaf:
        return None
    return session, leaf
