"""A task that travels: its JSON plus the files the reference needs, rebuilt in a folder on another machine
(a Ray worker) whose disk does not hold the task folder.

What is shipped: every reference file the task's directions name, the Python files beside them (a reference
may import a sibling module), and task.toml. Baselines stay home: evaluation never reads them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from engine.tasks.model import Task

MAX_TASK_BYTES = 16 * 1024 * 1024


def pack_task(task: Task) -> dict[str, Any]:
    files: dict[str, str] = {}
    refs = {d: Path(s.reference_path) for d, s in task.directions.items()}
    folders = {p.parent for p in refs.values()}
    if len(folders) != 1:
        raise ValueError(f"task {task.name}: reference files in several folders ({sorted(map(str, folders))})")
    (folder,) = folders
    names = [p.name for p in refs.values()] + sorted(p.name for p in folder.glob("*.py"))
    if (folder / "task.toml").is_file():
        names.append("task.toml")
    total = 0
    for name in dict.fromkeys(names):
        text = (folder / name).read_text()
        total += len(text)
        if total > MAX_TASK_BYTES:
            raise ValueError(f"task {task.name}: its files exceed {MAX_TASK_BYTES} bytes; too big to ship")
        files[name] = text
    tj = task.to_json()
    return {"task": tj, "files": files, "refs": {d: p.name for d, p in refs.items()},
            "root_is_folder": Path(task.root) == folder, "digest": _digest(tj, files)}


def unpack_task(packed: dict[str, Any], base: Path) -> Task:
    """Write the files under `base/<digest>/` (once; concurrent workers race safely) and return the Task
    with its paths pointing there."""
    digest = str(packed["digest"])
    folder = Path(base) / digest
    if not (folder / ".complete").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = folder.parent / f".tmp-{digest}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        tmp.mkdir()
        for name, text in packed["files"].items():
            if "/" in name or name.startswith("."):
                raise ValueError(f"unsafe task file name {name!r}")
            (tmp / name).write_text(text)
        (tmp / ".complete").write_text("")
        try:
            os.rename(tmp, folder)
        except OSError:    # another worker won: use its copy
            shutil.rmtree(tmp, ignore_errors=True)
    tj = json.loads(json.dumps(packed["task"]))
    for d, spec in tj["directions"].items():
        spec["reference_path"] = str(folder / packed["refs"][d])
    tj["root"] = str(folder) if packed.get("root_is_folder") else str(folder / Path(tj["root"]).name)
    return Task.from_json(tj)


def _digest(task_json: dict[str, Any], files: dict[str, str]) -> str:
    h = hashlib.sha256(json.dumps(task_json, sort_keys=True).encode())
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return h.hexdigest()[:16]
