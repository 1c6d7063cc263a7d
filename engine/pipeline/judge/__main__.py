"""`python -m engine.pipeline.judge REQUEST.json` (or `--standby TIMER_SO TIMER_MODULE`):
engine/pipeline/judge/main.py."""

import sys

from engine.pipeline.judge.main import exit_without_teardown, main

# the result file is final and the runner gone; the caller waits for this process's exit
exit_without_teardown(main(sys.argv[1:]))
