"""A standby child for the tests of engine.procs.StandbyChild: `python -m tests.doubles.standby_eof --standby OUT`
writes `up` into OUT, waits for its stdin to close, then writes `eof` and exits; it never exits otherwise."""

import sys
import time
from pathlib import Path

out = Path(sys.argv[2])
out.write_text("up")
sys.stdin.read()             # EOF: let go
out.write_text("eof")
time.sleep(0.2)
