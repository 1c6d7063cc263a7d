"""Baselines measured once per session: eager, torch.compile and the judge's null loop, per config.

A session (an evolution, the app) evaluates many candidates of one task on one GPU; timing eager and
torch.compile again for each is most of an evaluation's timing phase, and compiling the reference with
torch.compile each time costs more still. The judge returns what it measured; the next request on the same
GPU carries it back (`JudgeRequest.session_baselines`), and the judge reuses it after a quick re-timing of
one baseline agrees within 10 % (else it measures all anew, and says so in the result's `baseline_drift`).
Every RECHECK_EVERY-th evaluation of a key measures in full regardless. The speedup is still a ratio taken
on the same GPU in the same session; nothing is kept on disk.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

RECHECK_EVERY = 10

Key = tuple[Any, ...]


def key_for(task_json: dict[str, Any], direction: str, gpu: int | None, baselines: tuple[str, ...],
            timing_params: dict[str, Any]) -> Key:
    task_hash = hashlib.sha256(json.dumps(task_json, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return (task_hash, direction, gpu, tuple(baselines), json.dumps(timing_params, sort_keys=True))


class SessionBaselines:
    def __init__(self, recheck_every: int = RECHECK_EVERY):
        self.recheck_every = recheck_every
        self._known: dict[Key, dict[str, dict[str, Any]]] = {}
        self._device: dict[Key, Any] = {}
        self._uses: dict[Key, int] = {}
        self._lock = threading.Lock()

    def for_request(self, key: Key) -> dict[str, dict[str, Any]] | None:
        """What the next request under `key` may reuse; None when it must measure everything."""
        with self._lock:
            n = self._uses.get(key, 0)
            self._uses[key] = n + 1
            if n % self.recheck_every == 0:
                return None
            known = self._known.get(key)
            return {k: dict(v) for k, v in known.items()} if known else None

    def update(self, key: Key, result: dict[str, Any]) -> None:
        """Keep what a judge measured (not what it reused); forget everything if the device changed."""
        device = _identity(result.get("device"))
        with self._lock:
            if key in self._device and self._device[key] != device:
                self._known.pop(key, None)
            self._device[key] = device
            known = self._known.setdefault(key, {})
            for name in result.get("baseline_drift") or {}:
                known.pop(name, None)
            for name, row in (result.get("timing") or {}).items():
                if (row.get("baselines") or {}).get("from") != "measured" or "null" not in row:
                    continue
                entry: dict[str, Any] = {"null_ms": row["null"]["median_ms"], "null_gap_ms": row["null"]["gap_ms"]}
                for b in ("eager", "compile", "compile_error"):
                    if b in row:
                        entry[b] = row[b]
                known[name] = entry


def _identity(device: Any) -> Any:
    if not isinstance(device, dict):
        return None
    return tuple(str(device.get(k)) for k in ("gpu", "driver", "torch", "cuda", "uuid"))


SESSION = SessionBaselines()
