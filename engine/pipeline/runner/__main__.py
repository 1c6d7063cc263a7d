"""`python -m engine.pipeline.runner CONTROL_FD KEY_FD RECORD_FD [ARENA_FD]`: engine/pipeline/runner/main.py. Imports
what main.py imports and nothing more: the runner jails itself before torch or the candidate loads."""

import sys

from engine.jail import privileges
from engine.pipeline.runner.main import main

# the judge waits for this process to be gone before it times the baselines
privileges.exit_without_teardown(main(sys.argv[1:]))
