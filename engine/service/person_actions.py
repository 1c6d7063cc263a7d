"""What a person does to a workspace candidate outside an evolution loop, recorded the same way whoever asks: a
hand edit (the candidate opened in $VISUAL/$EDITOR and committed as a `human` child: the commit is its record) and
an export (the package written and an `exported` event noted on the candidate). `kbench edit` and `kbench export`
run these, and so does the app's backend; they differ only in who asked (an export's `by`: "cli" or "tui") and in
what comes next (the app hands an edit to the session's running loop where there is one, else evaluates it).

Lazy imports: engine.export, only when exporting (it pulls in the package templates and the plan's checks).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from engine.errors import KbenchError
from engine.proposers.base import ProposalRequest
from engine.proposers.human import HumanProposer

if TYPE_CHECKING:
    from engine.tasks.model import Task
    from engine.workspace import CandidateRecord, Workspace

EXPORTED = "exported"   # the event an export notes on its forward candidate


@dataclass(frozen=True)
class Exported:
    """A written export package: where, the plan it came from, and what its README warns about."""
    out: Path
    plan: Any                 # engine.export's plan (native, KernelBench or Triton)
    warnings: tuple[str, ...]
    notes: tuple[str, ...]


def hand_edit(ws: Workspace, cid: str, task_of: Callable[[str], Task], *, env: Mapping[str, str] | None = None,
              run: Callable[..., Any] | None = None) -> CandidateRecord:
    """Open candidate `cid` in the editor (blocks) and commit the result as a `human` candidate, its child, one
    generation down (`task_of`: a session's task). Raises KbenchError with the proposer's reason where nothing comes
    of it (no editor, the files unchanged, the editor failed). `run`: how the editor is run (tests)."""
    rec = ws.resolve(cid)
    session = rec.session
    task = task_of(session)
    direction = ws.session(session).direction
    kw: dict[str, Any] = {}
    if env is not None:
        kw["env"] = env
    if run is not None:
        kw["run"] = run
    prop = HumanProposer(**kw)
    if not prop.available():
        raise KbenchError(prop.unavailable_reason())
    known = frozenset(v.record.source_hash for v in ws.candidates(session, strict=False))
    p = prop.propose(ProposalRequest(task, "mutate", direction, parents=(ws.files(cid),), known_hashes=known))
    if not p.ok or p.candidate is None:
        raise KbenchError(f"no candidate from the edit: {p.reason}")
    new = ws.commit_candidate(session, p.candidate, parents=[rec.id], operator=p.operator, proposer="human",
                              generation=rec.generation + 1, title=f"hand edit of {rec.id}",
                              rationale=p.rationale, prompt=p.prompt_md())
    return new


def export_candidate(ws: Workspace, cid: str, out: str | Path | None, *, by: str, name: str | None = None,
                     force: bool = False, overwrite: bool = False, backward: str | None = None,
                     with_backward: bool = True, archs: str | None = None) -> Exported:
    """Write candidate `cid`'s export package to `out` (None: <workspace>/exports/<package name>) and note an
    `exported` event on it. Raises engine.export's ExportError where the candidate cannot be exported."""
    from engine.export import plan_from_workspace, write_package
    from engine.workspace import default_export_dir
    plan = plan_from_workspace(ws, cid, name=name or None, force=force, backward=backward,
                               with_backward=with_backward, archs=archs)
    dest = Path(out) if out else default_export_dir(ws.path, plan.name)
    write_package(plan, dest, overwrite=overwrite)
    ws.record_event(ws.resolve(cid).id, EXPORTED,
                    {"out": str(dest.resolve()), "name": plan.name, "forced": plan.forced,
                     "backward": plan.backward.candidate_id if plan.backward else None}, by=by)
    return Exported(dest, plan, tuple(plan.warnings), tuple(plan.notes))
