"""Carry a KernelBench candidate's load_inline builds from the compile stage to the runner without a rebuild.

torch's JIT build writes a build.ninja with absolute paths, so the copy of the build folder the runner imports
from (in its own scratch) looks changed to ninja and the candidate would compile a second time, 60-80 s inside
the evaluation. torch skips the build step when its in-process versioner (`JIT_EXTENSION_VERSIONER`) already
holds version 0 for the same sources, build arguments and build folder; that is the state a process is in after
it built the extension itself. So the compile child records each versioner call (`recording_versioner`), the
compile stage keeps those that built in place as a manifest beside the extensions folder (`write_manifest`), the
judge stages it into the runner's copy, and the runner replays it there before the candidate is imported
(`seed_versions`). torch's own hash of the files then decides: a candidate whose import writes other sources
bumps the version and builds as torch would.
"""

from __future__ import annotations

import inspect
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Protocol

MANIFEST = "kbench-prebuilt.json"
_KEYED = ("name", "source_files", "build_directory")   # rebased per folder; the rest is replayed as recorded


class Versioner(Protocol):
    """What kbench uses of torch's JIT_EXTENSION_VERSIONER (torch.utils._cpp_extension_versioner.ExtensionVersioner),
    structurally, so that this module never imports torch. bump_version_if_changed's parameters differ between
    torch versions (the recorder binds whatever they are)."""

    def get_version(self, name: str) -> int | None: ...

    def bump_version_if_changed(self, *args: Any, **kwargs: Any) -> int: ...


def recording_versioner(versioner: Versioner, log: list[dict[str, Any]]) -> None:
    """Wrap `versioner.bump_version_if_changed` (torch's JIT_EXTENSION_VERSIONER) so each call is appended to
    `log` with its bound arguments and the version it returned."""
    original: Callable[..., int] = versioner.bump_version_if_changed
    signature = inspect.signature(original)

    def bump(*args: Any, **kwargs: Any) -> int:
        version = original(*args, **kwargs)
        try:
            bound = dict(signature.bind(*args, **kwargs).arguments)
            log.append({**{k: _jsonable(v) for k, v in bound.items()}, "version": version})
        except (TypeError, ValueError):
            pass  # a torch whose versioner takes other arguments: nothing recorded, the runner builds again
        return version

    versioner.bump_version_if_changed = bump  # type: ignore[method-assign]


def manifest_path(ext_root: Path) -> Path:
    """Where the compile stage keeps `ext_root`'s manifest: beside the folder, not in it. The compile child runs
    the candidate's import with write access to `ext_root`, so a file in there could be a link it planted to
    one of the user's files; kbench writes this one from its own process."""
    return Path(ext_root).with_name(Path(ext_root).name + ".prebuilt.json")


def write_manifest(ext_root: Path, calls: list[dict[str, Any]], built_in: Path | None = None) -> list[str]:
    """Keep the recorded builds the runner can reuse and write them to `manifest_path(ext_root)` (whole or not
    at all: a temp file renamed over it); their names.

    Reusable: built at version 0 (a name built twice in one import is left out), in a folder under `ext_root`,
    from sources inside that folder (load_inline's main.cpp / cuda.cu; `load` of the candidate's own files is
    not carried), with the built library present. `built_in`: where the builds ran, where that is not
    `ext_root` (the compile child builds in a folder of its own, copied into the cache afterwards)."""
    root = os.path.realpath(built_in or ext_root)
    names = [str(c.get("name")) for c in calls]
    entries = []
    for call in calls:
        name = str(call.get("name"))
        build_dir = os.path.realpath(str(call.get("build_directory") or ""))
        sources = [os.path.realpath(str(s)) for s in call.get("source_files") or []]
        if (call.get("version") != 0 or names.count(name) != 1 or os.path.dirname(build_dir) != root
                or not sources or any(os.path.dirname(s) != build_dir for s in sources)
                or not os.path.isfile(os.path.join(build_dir, f"{name}.so"))):
            continue
        entries.append({"name": name, "folder": os.path.basename(build_dir),
                        "sources": [os.path.basename(s) for s in sources],
                        "arguments": {k: v for k, v in call.items() if k not in (*_KEYED, "version")}})
    target = manifest_path(ext_root)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump({"builds": entries}, fh, indent=1)
    os.replace(tmp, target)
    return [e["name"] for e in entries]


def seed_versions(ext_root: str, versioner: Versioner | None = None) -> list[str]:
    """Replay the manifest in `ext_root` (the runner's TORCH_EXTENSIONS_DIR, a copy of the compile stage's)
    into `versioner` (torch's JIT_EXTENSION_VERSIONER by default); the names seeded. The build folder string
    is formed as torch forms it (os.path.join(TORCH_EXTENSIONS_DIR, name)), since the versioner hashes it.
    A missing or unreadable manifest seeds nothing: the import then builds as it would without kbench."""
    try:
        builds = json.loads(Path(ext_root, MANIFEST).read_text()).get("builds") or []
    except (OSError, ValueError, AttributeError):
        return []
    if versioner is None:
        # lazy: engine.harness.build imports this module in processes that never load torch
        from torch.utils.cpp_extension import JIT_EXTENSION_VERSIONER as versioner
    seeded = []
    for b in builds:
        try:
            name, folder = str(b["name"]), os.path.join(ext_root, str(b["folder"]))
            sources = [os.path.join(folder, str(s)) for s in b["sources"]]
            if versioner.get_version(name) is not None or not os.path.isfile(os.path.join(folder, f"{name}.so")):
                continue
            version = versioner.bump_version_if_changed(name, sources, build_directory=folder,
                                                        **dict(b.get("arguments") or {}))
        except (KeyError, TypeError, ValueError, AttributeError, OSError):
            continue
        if version == 0:
            seeded.append(name)
    return seeded


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
