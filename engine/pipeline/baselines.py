"""Baselines measured once per session: eager, torch.compile and the judge's null loop, per config.

A session (an evolution, the app) evaluates many candidates of one task on one GPU; timing eager and
torch.compile again for each is most of an evaluation's timing phase, and compiling the reference with
torch.compile each time costs more still. The judge returns what it measured; the next request on the same
GPU carries it back (`JudgeRequest.session_baselines`), and the judge reuses it after a quick re-timing of
one baseline agrees within 10 % (else it measures all anew, and says so in the result's `baseline_drift`).
After RECHECK_EVERY evaluations that reused them, a key's baselines are measured in full again. The speedup
is still a ratio taken on the same GPU in the same session; nothing is kept on disk.

The judge times baselines only after the candidate's runner (and anything it left running) is stopped, and
only an evaluation without an error, with every integrity check passed and no hidden work, is kept: no
candidate can leave slowed-down baselines behind for the ones after it.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

from engine.pipeline.protocol.result import MEASURED, REUSED, JudgeResult
from engine.pipeline.protocol.types import SessionBaseline

RECHECK_EVERY = 10

Key = tuple[Any, ...]


def key_for(task_json: dict[str, Any], direction: str, gpu: int | None, baselines: tuple[str, ...],
            timing_params: dict[str, Any]) -> Key:
    task_hash = hashlib.sha256(json.dumps(task_json, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return (task_hash, direction, gpu, tuple(baselines), json.dumps(timing_params, sort_keys=True))


class SessionBaselines:
    def __init__(self, recheck_every: int = RECHECK_EVERY):
        self.recheck_every = recheck_every
        self._known: dict[Key, dict[str, SessionBaseline]] = {}
        self._device: dict[Key, tuple[str, ...] | None] = {}
        self._reused: dict[Key, int] = {}     # evaluations that reused the key's baselines since a full one
        self._lock = threading.Lock()

    def for_request(self, key: Key) -> dict[str, SessionBaseline] | None:
        """What the next request under `key` may reuse; None when it must measure everything."""
        with self._lock:
            known = self._known.get(key)
            if not known or self._reused.get(key, 0) >= self.recheck_every - 1:
                return None
            return dict(known)     # SessionBaseline and TimingStats are never changed once made

    def update(self, key: Key, result: JudgeResult) -> None:
        """Keep what a judge measured (not what it reused) in a clean evaluation; forget everything if the
        device changed."""
        device = result.device.identity() if result.device else None
        sources = {row.baselines.source for row in result.timing.values() if row.baselines}
        with self._lock:
            if key in self._device and self._device[key] != device:
                self._known.pop(key, None)
                self._reused.pop(key, None)
            self._device[key] = device
            known = self._known.setdefault(key, {})
            for name in result.baseline_drift:
                known.pop(name, None)
            if REUSED in sources:
                self._reused[key] = self._reused.get(key, 0) + 1
            elif MEASURED in sources:
                self._reused[key] = 0
            if not result.clean():
                return
            for name, row in result.timing.items():
                if row.baselines is None or row.baselines.source != MEASURED or row.hidden_work:
                    continue
                entry = row.session_baseline()
                if entry.eager is not None or entry.compile is not None or entry.compile_error is not None:
                    known[name] = entry


SESSION = SessionBaselines()
