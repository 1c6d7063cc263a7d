"""Creating and removing a session: its root commit (the task's files and `.kbench/session.json`), the ref
`refs/kbench/<name>/root` and the branch `sessions/<name>`, at the root until a best exists. Both run
under the workspace writer lock and the session's write guard (`writers.write_guard`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.tasks.loader import load_task
from engine.tasks.model import Task
from engine.workspace import commits, gitio, gitrefs, writers
from engine.workspace.errors import WorkspaceError
from engine.workspace.naming import CANDIDATE_NS, branch_ref, check_session_name, check_token, root_ref
from engine.workspace.records import now_iso
from engine.workspace.repo import WorkspaceRepo


def create(wr: WorkspaceRepo, name: str, task: Task | str | Path, direction: str, proposer: str, model: str | None,
           config: dict[str, Any] | None, description: str | None) -> None:
    """Write session `name`'s root commit and refs; WorkspaceError where the name is taken."""
    check_session_name(name)
    check_token("proposer", proposer)
    if not isinstance(task, Task):
        task = load_task(task)
    if direction not in task.directions:
        raise WorkspaceError(f"task {task.name!r} has no {direction} direction "
                             f"(it has: {', '.join(task.directions) or 'none'})")
    files = task_files(task)
    created = now_iso()
    session_json = {"schema": 1, "name": name, "task": task.name, "task_format": task.format,
                    "direction": direction, "proposer": proposer, "model": model, "created": created,
                    "description": description if description is not None else task.description,
                    "config": config or {}, "task_files": sorted(files), "task_json": task.to_json()}
    with wr.writing(), writers.write_guard(wr.git_dir, name):
        taken = [r for r in (root_ref(name), branch_ref(name)) if wr.ref(r)]
        if not taken and wr.refs(f"{CANDIDATE_NS}{name}/"):
            taken = [f"{CANDIDATE_NS}{name}/*"]
        if taken:
            raise WorkspaceError(f"session {name!r} already exists in {wr.path} ({', '.join(taken)}); "
                                 "choose another name")
        root = commits.write_session_root(wr, name, files, session_json, task.name, direction, proposer,
                                          session_json["description"])
        wr.update_refs([gitrefs.RefUpdate(root_ref(name), root), gitrefs.RefUpdate(branch_ref(name), root)],
                       f"kbench: start session {name}")


def discard_empty(wr: WorkspaceRepo, name: str) -> bool:
    """Remove session `name`'s refs where it holds no candidate; True where it was removed."""
    with wr.writing(), writers.write_guard(wr.git_dir, name):
        if set(wr.refs(f"{CANDIDATE_NS}{name}/")) - {root_ref(name)}:
            return False
        refs = {r: wr.ref(r) for r in (root_ref(name), branch_ref(name))}
        body = "".join(f"delete {r} {sha}\n" for r, sha in refs.items() if sha)
        if not body:
            return False
        gitio.run_git(wr.git_dir, ["update-ref", "-m", f"kbench: discard empty session {name}", "--stdin"],
                      input=body.encode())
    return True


def task_files(task: Task) -> dict[str, bytes]:
    """The task's own files, by name: its task.toml and each direction's reference."""
    files: dict[str, bytes] = {}
    root = Path(task.root)
    toml = root / "task.toml" if root.is_dir() else None
    if toml is not None and toml.is_file():
        files["task.toml"] = toml.read_bytes()
    for spec in task.directions.values():
        ref = Path(spec.reference_path)
        if ref.is_file() and ref.name not in files:
            files[ref.name] = ref.read_bytes()
    if not files:
        raise WorkspaceError(f"task {task.name!r}: none of its files could be read (root {root})")
    return files
