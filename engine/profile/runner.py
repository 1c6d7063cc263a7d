"""The profile stage: ncu on the candidate's kernels for one representative config, plus the torch
profiler's top device ops for the candidate and the reference, as one `profile` Verdict.

ncu missing, or not permitted (ERR_NVGPUCTRPERM), makes the verdict `skipped` with the reason; the torch
profiler part still runs and is kept in the verdict's data."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.profile.ncu import (
    build_ncu_command,
    ncu_unavailable_reason,
    parse_ncu_csv,
    permission_denied,
)
from engine.profile.summarise import ProfileSummary, summarise
from engine.verdict import Status, Verdict

STAGE = "profile"


@dataclass
class ProfileOptions:
    enabled: bool = True             # run after timing for candidates that pass
    config: str | None = None        # default: the task's last (largest) config
    launch_count: int = 3
    ncu: str | None = None           # ncu executable (default: found on PATH)
    ncu_timeout_s: float = 300
    torch_timeout_s: float = 180
    gpu: int | None = None


def representative_config(task: Any, wanted: str | None = None) -> str:
    names = [c.name for c in task.configs]
    if wanted:
        if wanted not in names:
            raise ValueError(f"task {task.name} has no config {wanted!r} (has: {', '.join(names)})")
        return wanted
    return names[-1]


def run_ncu(request: dict[str, Any], opts: ProfileOptions, extra_env: dict[str, str] | None = None
            ) -> tuple[list, str]:
    """(kernels, skip reason); kernels empty whenever the reason is set."""
    from engine.harness.sandbox import _reap, kill_group, scrubbed_env

    reason = ncu_unavailable_reason(opts.ncu)
    if reason:
        return [], reason
    with tempfile.TemporaryDirectory(prefix="kbench-profile-") as tmp:
        req = Path(tmp) / "request.json"
        req.write_text(json.dumps({**request, "mode": "ncu", "launches": opts.launch_count,
                                   "result_path": str(Path(tmp) / "result.json")}))
        ncu = opts.ncu or shutil.which("ncu") or "ncu"   # resolved here: the scrubbed PATH may not hold it
        cmd = build_ncu_command([sys.executable, "-m", "engine.profile.child", str(req)], ncu=ncu,
                                launch_count=opts.launch_count)
        try:
            proc = subprocess.Popen(cmd, cwd=tmp, env=scrubbed_env(extra_env, opts.gpu), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                    text=True, errors="replace")
        except OSError as exc:
            return [], f"ncu could not be started: {exc}"
        try:
            out, _ = proc.communicate(timeout=opts.ncu_timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            _reap(proc)
            return [], f"ncu timed out after {opts.ncu_timeout_s:.0f} s"
        finally:
            kill_group(proc)
    if permission_denied(out):
        return [], "ncu is not permitted to read GPU performance counters (ERR_NVGPUCTRPERM)"
    kernels = parse_ncu_csv(out)
    if not kernels:
        tail = out.strip().splitlines()[-3:]
        return [], "ncu profiled no candidate kernel" + (f": {' | '.join(tail)}" if tail else "")
    return kernels, ""


def run_torch_profiler(request: dict[str, Any], opts: ProfileOptions, extra_env: dict[str, str] | None = None
                       ) -> tuple[list[dict], list[dict], str]:
    from engine.harness.sandbox import run_child

    outcome = run_child("engine.profile.child", {**request, "mode": "torch"}, timeout_s=opts.torch_timeout_s,
                        gpu=opts.gpu, extra_env=extra_env)
    res = outcome.result
    if outcome.crashed or res.get("error"):
        return [], [], str(res.get("error") or outcome.describe_crash())
    return list(res.get("candidate_ops") or ()), list(res.get("reference_ops") or ()), ""


def profile_verdict(summary: ProfileSummary, torch_error: str = "") -> Verdict:
    data = {"summary": summary.to_json(), "text": summary.to_text()}
    if torch_error:
        data["torch_error"] = torch_error
    if summary.ncu_skipped:
        return Verdict(STAGE, Status.SKIPPED, summary.ncu_skipped, data)
    return Verdict(STAGE, Status.PASS, f"{summary.bottleneck}-bound", data)


def profile_candidate(task: Any, candidate: Any, direction: str = "forward", options: ProfileOptions | None = None,
                      peaks: Any = None, cache_root: Path | None = None) -> Verdict:
    """Build (cache hit after an evaluation) and profile a candidate; the `profile` Verdict."""
    import time

    from engine.harness.build import build_candidate, kernelbench_extensions_dir
    from engine.harness.evaluate import default_cache_root
    from engine.harness.toolchain import detect as detect_toolchain

    t0 = time.monotonic()
    opts = options or ProfileOptions()
    cache_root = cache_root or default_cache_root()
    build = build_candidate(candidate, cache_root, detect_toolchain())
    if not build.ok:
        return Verdict(STAGE, Status.SKIPPED, f"the candidate does not build: {build.error or 'compilation failed'}")
    spec: dict[str, Any] = {"format": candidate.format, "module_name": build.module_name,
                            "so_path": str(build.so_path) if build.so_path else None}
    extra_env: dict[str, str] = {}
    if candidate.format == "kernelbench":
        src_dir = candidate.write_to(cache_root / "candidates" / candidate.source_hash)
        spec["py_path"] = str(src_dir / candidate.main_file)
        spec["module_name"] = f"kb_modelnew_{candidate.source_hash}"
        extra_env["TORCH_EXTENSIONS_DIR"] = str(kernelbench_extensions_dir(cache_root, candidate))
    config = representative_config(task, opts.config)
    request = {"task": task.to_json(), "direction": direction, "candidate": spec, "config": config}
    kernels, skipped = run_ncu(request, opts, extra_env)
    cand_ops, ref_ops, torch_error = run_torch_profiler(request, opts, extra_env)
    cost = next(c for c in task.configs if c.name == config).cost.get(direction)
    summary = summarise(kernels, peaks, config=config, torch_ops=cand_ops, reference_ops=ref_ops,
                        ncu_skipped=skipped, flops=cost.flops if cost is not None else None)
    verdict = profile_verdict(summary, torch_error)
    verdict.data["seconds"] = round(time.monotonic() - t0, 2)
    return verdict


def profile_feedback(stages: Any) -> str:
    """The profile text for a prompt from a candidate's stages (`CandidateStatus.stages`), or ""."""
    st = stages.get(STAGE) if stages else None
    v = st.verdict.verdict if st is not None and st.verdict is not None else None
    return str(v.data.get("text") or "") if v is not None else ""


def summaries_from(verdicts: Sequence[Verdict]) -> list[ProfileSummary]:
    return [ProfileSummary.from_json(v.data["summary"]) for v in verdicts
            if v.stage == STAGE and isinstance(v.data.get("summary"), dict)]


def profile_stage(task: Any, candidate: Any, direction: str, eval_options: Any, peaks_json: dict | None) -> Verdict:
    """The stage as `evaluate()` runs it after timing: never raises, never blocks (pass or skipped)."""
    from engine.harness.roofline import Peaks

    try:
        peaks = Peaks(**{"measured_at": 0.0, **peaks_json}) if peaks_json else None
        opts = ProfileOptions(gpu=getattr(eval_options, "gpu", None))
        timing = getattr(eval_options, "timing_configs", None)
        if timing:
            opts.config = timing[-1]
        return profile_candidate(task, candidate, direction, opts, peaks=peaks,
                                 cache_root=getattr(eval_options, "cache_root", None))
    except Exception as exc:  # noqa: BLE001 - profiling is feedback; its failure must not fail the candidate
        return Verdict(STAGE, Status.SKIPPED, f"profiling failed: {type(exc).__name__}: {str(exc)[:300]}")
