"""Jail, then exec: `python -I -S engine/jail/exec.py SPEC_JSON -- PROGRAM ARGS...`.

How kbench runs a compiler on candidate sources: the jail (engine.jail.apply) is applied to this small
process, which then replaces itself with the program; Landlock, seccomp, the network namespace and
no_new_privs survive exec. Run with -I -S it loads nothing but the standard library and engine.jail, in
about 20 ms. Exit code 126 where the program cannot be started, or where the spec asks for a complete jail
(refuse_incomplete) and a layer did not take hold.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: exec.py SPEC_JSON -- PROGRAM [ARGS...]\n")
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from engine.jail import REFUSED, JailSpec, apply  # lazy: importable once the line above puts kbench on sys.path

    spec = JailSpec.from_json(json.loads(argv[0]))
    cmd = argv[2:]
    refusal = apply(spec).refusal(spec)
    if refusal:
        sys.stderr.write(f"{REFUSED} {cmd[0]} not run: {refusal}\n")
        return 126
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        sys.stderr.write(f"cannot run {cmd[0]}: {exc}\n")
        return 126
    return 126


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
