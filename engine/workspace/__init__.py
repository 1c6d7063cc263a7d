"""The workspace: a git repository where every candidate is a commit and every judgement a note.

Public surface: `Workspace` (open/create, sessions, commit candidates, record verdicts, measurements,
overrides and events, list and read them back) and the dataclasses it returns. See docs/formats.md
("The workspace repository") for the refs, trailers and note schema.
"""

from engine.workspace.errors import (CorruptNoteError, LockTimeoutError, NotAWorkspaceError,
                                     UnknownCandidateError, UnknownSessionError, WorkspaceError)
from engine.workspace.naming import BRANCH_NS, CANDIDATE_NS, NOTES_REF, branch_ref, candidate_ref, root_ref
from engine.workspace.note_entries import (Comment, ConfigTiming, Event, Measurement, NoteEntry, Override, UnknownEntry,
                                           VerdictNote)
from engine.workspace.note_parsing import parse_note
from engine.workspace.records import CandidateRecord, SessionInfo
from engine.workspace.views import CandidateStatus, CandidateView, StageState, best_of, fold
from engine.workspace.paths import default_export_dir, default_path
from engine.workspace.workspace import Workspace

__all__ = [
    "Workspace", "default_path", "default_export_dir",
    "SessionInfo", "CandidateRecord", "CandidateStatus", "CandidateView", "StageState",
    "VerdictNote", "Measurement", "ConfigTiming", "Override", "Event", "Comment", "UnknownEntry", "NoteEntry",
    "parse_note", "fold", "best_of",
    "NOTES_REF", "CANDIDATE_NS", "BRANCH_NS", "root_ref", "candidate_ref", "branch_ref",
    "WorkspaceError", "NotAWorkspaceError", "UnknownCandidateError", "UnknownSessionError", "CorruptNoteError",
    "LockTimeoutError",
]
