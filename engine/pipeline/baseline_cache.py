"""Baselines kept on disk between evaluations: eager and torch.compile per config and GPU, so that `kbench eval`
of a built candidate does not time (and torch.compile) the reference again every run.

The key. A file under `<cache root>/baselines/` holds one task direction as the judge would measure it: the
task (everything but its configs), the content of its reference files, the direction, the baselines asked for
(eager, torch.compile), the timing parameters and kbench's timing helper (its module name is its source hash and
toolchain). Inside it, entries are filed by GPU: its name, uuid, driver, torch and CUDA versions
(DeviceInfo.key()), and within a GPU by config name with a hash of the config's arguments, seed and init. The
parent does not know which GPU the judge will get: the request carries the file's entries for every GPU
(JudgeRequest.cached_baselines) and the judge takes only those of its own (engine/pipeline/judge/timing.py).

The drift check. A cached config is never reused blind: the judge re-times its eager baseline quickly (20
iterations) and reuses the entry only within BASELINE_DRIFT (10 %) of the cached figure. Where any config drifts,
that config is measured in full at once, and this GPU's whole entry is dropped from the file and replaced by what
this evaluation measured; the report says so, with the figures.

Trust. Only the trusted parent writes the file, and only from its own judge's measurements of a clean evaluation
(finished, every config correct, every integrity check passed, no hidden work, no other process seen on the GPU),
as the session's baselines (engine/pipeline/baselines.py). Candidate code cannot reach it: the runner's jail
(engine.jail.profiles.runner_spec) writes only its scratch folder under the temp folder and reads only the
machine's code and its own read-only copy of the candidate, and the compilers' jails write only their work folder.

Failure. A file that is unreadable, corrupt, of another format or another key is ignored with a note (and
replaced by the next write); a folder that cannot be written leaves the cache as it was, with a note. Neither
fails or slows the evaluation. Writes are atomic (a temporary file renamed over the old one): a reader sees
the old file or the new one, and of two evaluations writing at once the later one wins.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine import jsonable
from engine.errors import DataError
from engine.pipeline.judge.timing import BASELINE_DRIFT
from engine.pipeline.protocol.result import CACHED, MEASURED, JudgeResult
from engine.pipeline.protocol.types import JudgeRequest, SessionBaseline

SCHEMA = 1               # the file's format and the judge's timing protocol: a change here starts a new cache
FOLDER = "baselines"
MAX_BYTES = 4 << 20      # a larger file is not kbench's: ignored
MAX_GPUS = 16            # entries kept per file: the most recently measured GPUs (a driver update makes a new one)

USE, FRESH, OFF = "use", "fresh", "off"   # EvalOptions.baseline_cache: read and keep; keep only; neither


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _file_sha(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        return f"unreadable: {type(exc).__name__}"


def cache_key(request: JudgeRequest) -> dict[str, Any]:
    """What must be equal for a file's baselines to serve `request` (the GPU and the config are inside it)."""
    task = {k: v for k, v in request.task.items() if k != "configs"}
    refs = sorted({str(d.get("reference_path")) for d in (task.get("directions") or {}).values()})
    return {"schema": SCHEMA, "task": _sha(task), "references": {p: _file_sha(p) for p in refs},
            "direction": request.direction, "baselines": list(request.baselines),
            "timing": jsonable.dump(request.timing_params), "timer": request.timer.module_name}


def config_hashes(request: JudgeRequest) -> dict[str, str]:
    """Each config's hash over what shapes its baselines: its arguments, seed and initialisation."""
    return {c["name"]: _sha({k: c.get(k) for k in ("model_kwargs", "input_kwargs", "seed", "init")})
            for c in request.task.get("configs") or []}


@dataclass
class BaselineCache:
    """One task direction's file: read before the judge runs, written after it from the judge's result."""
    path: Path
    key: dict[str, Any]
    configs: dict[str, str]              # config name -> config hash
    mode: str = USE
    notes: list[str] = field(default_factory=list)
    sent: dict[str, dict[str, SessionBaseline]] = field(default_factory=dict)   # what the judge was given

    @classmethod
    def for_request(cls, cache_root: Path, request: JudgeRequest, mode: str = USE) -> "BaselineCache":
        key = cache_key(request)
        return cls(Path(cache_root) / FOLDER / f"{_sha(key)[:32]}.json", key, config_hashes(request), mode)

    def read(self) -> dict[str, dict[str, SessionBaseline]] | None:
        """The file's baselines for the request's configs, by GPU key (None where there are none, or in FRESH
        mode); what the judge is given, as JudgeRequest.cached_baselines."""
        if self.mode != USE:
            return None
        out: dict[str, dict[str, SessionBaseline]] = {}
        for gpu, entry in self._load().items():
            got = {}
            for name, stored in (entry.get("configs") or {}).items():
                if not isinstance(stored, dict) or self.configs.get(name) is None \
                        or stored.get("config") != self.configs[name]:
                    continue
                try:
                    got[name] = jsonable.load(SessionBaseline, stored, f"{self.path} ({name})")
                except DataError as exc:
                    self.notes.append(f"a cached entry was ignored ({exc})")
            if got:
                out[gpu] = got
        self.sent = out
        return out or None

    def keep(self, result: JudgeResult, session: dict[str, SessionBaseline] | None = None,
             trusted: bool = True) -> dict[str, Any]:
        """Write what the judge measured for later evaluations, drop what drifted; the report's `baselines`.
        `session`: the session baselines the request carried (their drift is not the cache's); `trusted`: False
        where the evaluation's figures cannot be vouched for (another process shared the GPU)."""
        device = result.device
        drifted = {n: r for n, r in result.baseline_drift.items() if n not in (session or {})}
        summary = self._summary(result, drifted)
        if self.mode == OFF or device is None or not device.gpu:
            return summary
        gpu = device.key()
        measured = {}
        if trusted and result.clean() and not result.gpu_shared:
            for name, row in result.timing.items():
                if (row.baselines is None or row.baselines.source != MEASURED or row.hidden_work
                        or name not in self.configs):
                    continue
                entry = row.session_baseline()
                if entry.eager is not None or entry.compile is not None or entry.compile_error is not None:
                    measured[name] = entry
        if not measured and not drifted:
            return summary
        data = {"schema": SCHEMA, "key": self.key, "devices": self._load(note=False)}
        if drifted or self.mode == FRESH:   # this GPU's entry is dropped whole: what follows was measured now
            data["devices"].pop(gpu, None)
        now = time.time()
        if measured:
            entry = data["devices"].setdefault(gpu, {"device": device.as_report(), "configs": {}})
            for name, b in measured.items():
                entry["configs"][name] = {"config": self.configs[name], **jsonable.dump(replace(b, measured_at=now))}
            entry["updated"] = now
        newest = sorted(data["devices"].items(), key=lambda kv: -float(kv[1].get("updated") or 0))[:MAX_GPUS]
        data["devices"] = dict(newest)
        why = self._write(data)
        summary["kept"] = sorted(measured) if not why else []
        if why:
            self.notes.append(f"the baselines could not be kept in {self.path.parent} ({why})")
        summary["notes"] = list(self.notes)
        return summary

    def _summary(self, result: JudgeResult, drifted: dict[str, Any]) -> dict[str, Any]:
        """Where each timed config's baselines came from, how old the cached ones are, and the re-timing's figures."""
        now = time.time()
        configs: dict[str, dict[str, Any]] = {}
        for name, row in result.timing.items():
            origin = row.baselines
            if origin is None:
                continue
            c: dict[str, Any] = {"source": origin.source}
            if origin.source == CACHED and origin.measured_at:
                c["age_s"] = round(max(now - origin.measured_at, 0.0), 1)
            if origin.recheck is not None:
                c["recheck"] = _change(origin.recheck.baseline, origin.recheck.now_ms, origin.recheck.session_ms)
            if name in drifted:
                c["drift"] = _change(drifted[name].baseline, drifted[name].now_ms, drifted[name].session_ms)
            configs[name] = c
        sources = {c["source"] for c in configs.values()}
        if not configs:
            state = "unused"        # nothing was timed (no GPU, a failed check, no timing asked for)
        elif self.mode == FRESH:
            state = "fresh"
        elif drifted:
            state = "drift"
        elif sources == {CACHED}:
            state = "hit"
        elif CACHED in sources:
            state = "partial"
        elif sources and MEASURED not in sources:
            state = "session"
        else:
            state = "miss"
        ages = [c["age_s"] for c in configs.values() if "age_s" in c]
        return {"cache": state, "path": str(self.path), "tolerance": BASELINE_DRIFT, "configs": configs,
                "age_s": max(ages) if ages else None, "kept": [], "notes": list(self.notes)}

    def _load(self, note: bool = True) -> dict[str, dict[str, Any]]:
        """The file's entries by GPU key ({} where there is no usable file; why, in the notes)."""
        why = ""
        try:
            if not self.path.exists():
                return {}
            if self.path.stat().st_size > MAX_BYTES:
                why = f"larger than {MAX_BYTES} bytes"
            else:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                if not isinstance(data, dict) or data.get("schema") != SCHEMA:
                    why = "not a baseline cache file of this kbench"
                elif data.get("key") != self.key:
                    why = "its key is not this task's"
                elif not isinstance(data.get("devices"), dict) or not all(
                        isinstance(e, dict) and isinstance(e.get("configs", {}), dict) for e in data["devices"].values()):
                    why = "its entries are malformed"
                else:
                    return data["devices"]
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            why = f"{type(exc).__name__}: {exc}"
        if note:
            self.notes.append(f"the cached baselines in {self.path} were ignored ({why}); they are measured again")
        return {}

    def _write(self, data: dict[str, Any]) -> str:
        """Write `data` atomically; "" or why it could not be written."""
        tmp = self.path.with_name(f".tmp-{self.path.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
            os.replace(tmp, self.path)
            return ""
        except OSError as exc:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            return f"{type(exc).__name__}: {exc.strerror or exc}"


def _change(baseline: str, now_ms: float, then_ms: float) -> dict[str, Any]:
    return {"baseline": baseline, "now_ms": now_ms, "cached_ms": then_ms,
            "change": round(now_ms / then_ms - 1.0, 4) if then_ms > 0 else None}


def describe(info: dict[str, Any]) -> list[str]:
    """The report's lines on the baselines (engine/pipeline/report.py), from EvalReport.baselines."""
    state, configs = info.get("cache"), info.get("configs") or {}
    tol = f"{info.get('tolerance', BASELINE_DRIFT):.0%}"
    checks = [f"{n} {c['recheck']['change']:+.1%}" for n, c in configs.items()
              if c.get("recheck") and c["recheck"].get("change") is not None]
    kept = " and kept in the cache" if info.get("kept") else ""
    if state in ("hit", "partial"):
        age = info.get("age_s")
        when = f", measured {_age(age)} ago" if age is not None else ""
        part = "" if state == "hit" else " for " + ", ".join(n for n, c in configs.items() if c["source"] == CACHED)
        line = f"baselines: from the cache{part}{when} on this GPU; eager re-timed: {', '.join(checks)} (within {tol})"
        if state == "partial":
            line += "; the others measured now" + kept
    elif state == "drift":
        moved = [f"{n} (eager {c['drift']['cached_ms']:.4g} ms cached, {c['drift']['now_ms']:.4g} ms now)"
                 for n, c in configs.items() if c.get("drift")]
        line = (f"baselines: the cache's moved by more than {tol} on {', '.join(moved)}: dropped and measured "
                f"again{kept}")
    elif state == "fresh":
        line = f"baselines: measured now (--fresh-baselines){kept}"
    elif state == "miss":
        line = f"baselines: measured now{kept}" + ("" if kept else " (not kept)")
    else:
        line = ""
    return [ln for ln in [line, *(f"note: {n}" for n in info.get("notes") or [])] if ln]


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
