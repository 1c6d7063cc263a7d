"""No path of the user's machine goes into a prompt. Compiler output, failure reasons, profiles and file errors
quote the build cache, the task's folder, the working folder, the Python environment or the home folder; a
prompt names what each is instead (`<kbench cache>/builds/.../kernel.cu(12): error ...`), which is all the model
needs and tells the API's operator nothing about the user's machine."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from engine.config.env import cache_root

# Another account's home folder (a path copied from elsewhere): the account name goes too.
_OTHER_HOMES = re.compile(r"(?<![\w.-])(?:/home|/Users)/[^/\s'\"`:;,)\]]+")


def machine_paths(task_root: Path | str | None = None) -> list[tuple[str, str]]:
    """(path, what a prompt says instead), the longest first so that the cache inside the home folder is named
    as the cache."""
    venv = sys.prefix if sys.prefix != sys.base_prefix else None      # a system Python's prefix is /usr
    named = [(cache_root(), "<kbench cache>"), (task_root, "<task folder>"), (Path.cwd(), "<working folder>"),
             (venv, "<python environment>"), (Path.home(), "<home>")]
    pairs: dict[str, str] = {}
    for path, label in named:
        if not path:
            continue
        for form in {str(path), os.path.realpath(path)}:
            if len(form) > 1:               # never "/" alone
                pairs.setdefault(form.rstrip("/"), label)
    return sorted(pairs.items(), key=lambda p: -len(p[0]))


def without_paths(text: str, paths: list[tuple[str, str]]) -> str:
    """`text` with every path of `paths` (machine_paths) and any other home folder named instead of quoted."""
    for path, label in paths:
        text = re.sub(re.escape(path) + r"(?![\w.-])", label, text)
    return _OTHER_HOMES.sub("<home>", text)
