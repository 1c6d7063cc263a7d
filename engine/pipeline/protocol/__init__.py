"""What crosses between kbench's process, the judge and the runner, typed: the request and the result files
(types.py, result.py), the control messages and their wire format (messages.py, wire.py), the shared-memory arena
(arena.py), the profile child's request and result (profile_types.py) and the timing helper's one call
(helper_call.py). Imports neither the judge's code nor the runner's; free of torch where the runner reads it before
its jail."""
