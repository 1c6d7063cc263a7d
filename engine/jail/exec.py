"""Launch a program for kbench: `python -I -S engine/jail/exec.py LAUNCH_JSON -- PROGRAM ARGS...`.

LAUNCH_JSON is {"jail": a JailSpec or null, "log": file or "", "report": file or "", "supervise": bool}. With
`supervise` (every step kbench starts but the ncu-profiled child), this process stays as the step's supervisor
(engine/jail/supervise.py: the program's process is forked, jails itself and execs; its output goes to the capped
`log`; when it ends, everything left of its tree is killed; `report` says what the jail and the limits were and
why the step was stopped). Without it, the jail is applied to this process, which then replaces itself with the
program (Landlock, seccomp, the network namespace and no_new_privs survive exec). Run with -I -S it loads
nothing but the standard library and engine.jail, in about 20 ms. Exit code 126 where the program cannot be
started, or where the spec asks for a complete jail (refuse_incomplete) and a layer did not take hold; a
program killed by a signal makes the supervisor end by the same signal.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: exec.py LAUNCH_JSON -- PROGRAM [ARGS...]\n")
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    # lazy: importable once the line above puts kbench on sys.path
    from engine.jail import JailSpec
    from engine.jail.supervise import Supervisor, jail_and_exec

    launch = json.loads(argv[0])
    spec = JailSpec.from_json(launch["jail"]) if launch.get("jail") else None
    cmd = argv[2:]
    if not launch.get("supervise"):
        return jail_and_exec(spec, cmd)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    code = Supervisor(spec, cmd, launch.get("log", ""), launch.get("report", "")).run()
    if code > 128 and code - 128 in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS,
                                     signal.SIGXFSZ, signal.SIGXCPU, signal.SIGFPE, signal.SIGILL):
        signal.signal(code - 128, signal.SIG_DFL)     # end as the program did: callers read -signal
        os.kill(os.getpid(), code - 128)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
