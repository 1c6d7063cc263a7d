"""The library policies' names, `pure` and `engineering` (what each allows: engine/integrity/policy.py).

Here, in the task model's layer, because task.toml declares a task's `library_policy` and the native loader
checks the name when it reads the file; engine/integrity/policy.py, above, imports them from here.
"""

from __future__ import annotations

from typing import Literal

LibraryPolicy = Literal["pure", "engineering"]
POLICIES: tuple[str, ...] = ("pure", "engineering")
