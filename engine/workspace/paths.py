"""Where the workspace and its exports live when the user names no folder."""

from __future__ import annotations

from pathlib import Path

from engine.config.env import workspace_dir

DEFAULT_DIR = "workspace"
EXPORTS_DIR = "exports"


def default_export_dir(workspace: Path, name: str) -> Path:
    """Where `kbench export` writes package `name` when no --out is given: `<workspace>/exports/<name>`, beside
    the candidates it comes from and out of the kbench checkout and the current directory. The workspace
    repository ignores the folder (info/exclude), so its `git status` stays clean."""
    exclude = workspace / ".git" / "info" / "exclude"
    try:
        text = exclude.read_text() if exclude.is_file() else ""
        if f"/{EXPORTS_DIR}/" not in text.splitlines() and (workspace / ".git").is_dir():
            exclude.parent.mkdir(parents=True, exist_ok=True)
            exclude.write_text(text + ("" if not text or text.endswith("\n") else "\n") + f"/{EXPORTS_DIR}/\n")
    except OSError:
        pass   # a read-only repository: the export is still written, git status just lists it
    return workspace / EXPORTS_DIR / name


def default_path() -> Path:
    """$KBENCH_WORKSPACE, else ./workspace (the folder the kbench checkout ships with a README)."""
    return workspace_dir() or Path.cwd() / DEFAULT_DIR
