"""Which kbench modules one candidate's way runs through, in every process (the CLI, the build worker, the judge,
the jailed runner), and how often each function is called: the figures of docs/architecture.md's "one
candidate's way".

    python scripts/trace_path.py run OUT [--tree TREE] -- ARGS...   # `python -m engine.cli ARGS` from TREE, traced
    python scripts/trace_path.py sum OUT [OUT...] [--calls PATTERN]

`run` puts a .pth that loads scripts/trace_path/kbtrace.py into this interpreter's site-packages for the run and
takes it out after (a run interrupted with SIGKILL leaves it: delete kbtrace.pth there). Every kbench process the
command starts is traced, jailed ones included, through the KBTRACE_DIR of an ancestor. `sum` prints per folder:
processes, modules run, module-to-module call edges, and pairs of top-level packages (engine.X) that call each
other; --calls prints the call counts of functions whose "module function" matches the pattern.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def top(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "engine" and len(parts) > 1 else parts[0]


def run(out: Path, tree: Path, args: list[str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    where = Path(site.getsitepackages()[0])
    pth, mod = where / "kbtrace.pth", where / "kbtrace.py"
    shutil.copy(HERE / "trace_path" / "kbtrace.py", mod)
    pth.write_text("import kbtrace\n")
    env = dict(os.environ, KBTRACE_DIR=str(out.resolve()),
               PYTHONPATH=os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])]))
    try:
        return subprocess.call([sys.executable, "-m", "engine.cli", *args], env=env)
    finally:
        pth.unlink(missing_ok=True)
        mod.unlink(missing_ok=True)


def summary(folder: Path, calls: str | None) -> None:
    mods: set[str] = set()
    edges: set[tuple[str, str]] = set()
    counts: dict[str, int] = {}
    procs = []
    for f in sorted(folder.glob("*.txt")):
        seen = 0
        for line in f.read_text().splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "P":
                procs.append(rest)
            elif kind == "M":
                mods.add(rest)
                seen += 1
            elif kind == "E":
                edges.add(tuple(rest.split()))
            elif kind == "C":
                name, n = rest.rsplit(" ", 1)
                counts[name] = counts.get(name, 0) + int(n)
        print(f"  {f.stem}: {seen} modules  ({procs[-1][:70] if procs else '?'})")
    pairs = {(top(a), top(b)) for a, b in edges if top(a) != top(b)}
    print(f"{folder}: {len(procs)} processes, {len(mods)} modules, {len(edges)} module edges, "
          f"{len(pairs)} top-level package pairs, {len({top(m) for m in mods})} top-level packages")
    for name, n in sorted(counts.items()):
        if calls and re.search(calls, name):
            print(f"    {name}: {n}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--tree", type=Path, default=REPO)
    r.add_argument("args", nargs=argparse.REMAINDER)
    s = sub.add_parser("sum")
    s.add_argument("out", type=Path, nargs="+")
    s.add_argument("--calls", default=None)
    a = ap.parse_args()
    if a.cmd == "run":
        return run(a.out, a.tree.resolve(), a.args[1:] if a.args[:1] == ["--"] else a.args)
    for folder in a.out:
        summary(folder, a.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
