"""Sandbox child: `python -m engine.harness.child REQUEST.json`. Checks and times one candidate.

It writes its result file after every step, so when a kernel hangs or kills the process the parent
still knows which config was running. Nothing here trusts the candidate: every call into it is
guarded, and a CUDA error that poisons the context stops the run with the cause.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from engine.tasks.model import Task

NO_GPU = "no CUDA GPU is visible to the evaluator"   # result["error"] where torch finds no GPU


class ResultFile:
    def __init__(self, path: Path):
        self.path = path
        self.data: dict[str, Any] = {"finished": False, "progress": None, "correctness": {}, "timing": {},
                                     "error": None, "device": None}

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, default=str))
        os.replace(tmp, self.path)

    def progress(self, stage: str, config: str | None = None) -> None:
        self.data["progress"] = {"stage": stage, "config": config, "t": time.time()}
        self.write()


def load_candidate_module(spec: dict[str, Any]) -> Any:
    """The candidate as a module: a built extension, or a KernelBench .py (which builds itself here)."""
    if spec.get("py_path"):
        import torch  # noqa: F401
        from engine.harness.runtimes.base import import_file
        return import_file(Path(spec["py_path"]), spec.get("module_name") or "kbench_candidate")
    from engine.harness.build import load_extension
    return load_extension(Path(spec["so_path"]), spec["module_name"])


def _context_broken() -> str | None:
    import torch
    try:
        torch.cuda.synchronize()
        return None
    except Exception as exc:  # sticky CUDA error: illegal address, launch failure...
        return str(exc).strip().splitlines()[0]


def run(request: dict[str, Any], out: ResultFile) -> None:
    import torch

    from engine.harness.correctness import check_config
    from engine.harness.device_info import gpu_info
    from engine.harness.runtimes import runtime_for
    from engine.harness.timing import Timer, TimingOptions, hidden_work_suspected

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

    task = Task.from_json(request["task"])
    direction = request["direction"]
    wanted = request.get("configs")
    configs = [c for c in task.configs if not wanted or c.name in wanted]
    out.data["device"] = gpu_info()
    if not torch.cuda.is_available():
        out.data["error"] = NO_GPU
        return
    device = torch.device("cuda")

    out.progress("load")
    runtime = runtime_for(task, direction)
    from engine.integrity.dynamic import check_patches, snapshot_patchable
    guard = snapshot_patchable() if request.get("integrity", True) else None
    try:
        module = load_candidate_module(request["candidate"])
    except Exception as exc:
        out.data["error"] = f"the candidate failed to load: {type(exc).__name__}: {exc}"
        return
    if guard is not None:  # engine.integrity.dynamic: monkey-patching at import and after each config
        out.data.setdefault("integrity", {})["@patches"] = check_patches(guard, "on import")
    entry = "forward" if direction == "forward" or task.format == "kernelbench" else "backward"
    if task.format != "kernelbench" and not hasattr(module, entry):
        out.data["error"] = f"the candidate's module exports no `{entry}` function"
        return

    all_ok = True
    if request.get("correctness", True):
        trials = int(request.get("trials", 2))
        for cfg in configs:
            out.progress("correctness", cfg.name)
            try:
                res = check_config(runtime, module, cfg, device, trials=trials)
            except Exception as exc:
                res = {"ok": False, "reason": f"raised {type(exc).__name__}: {str(exc).strip()[:800]}"}
            out.data["correctness"][cfg.name] = res
            if request.get("integrity", True):  # engine.integrity.dynamic: reward-hack checks on this config
                from engine.integrity.dynamic import check_integrity, safe
                out.data.setdefault("integrity", {})[cfg.name] = safe(check_integrity, runtime, module, cfg, device)
            out.write()
            all_ok &= bool(res["ok"])
            if guard is not None and out.data["integrity"]["@patches"]["ok"]:
                out.data["integrity"]["@patches"] = check_patches(guard, f"after config {cfg.name}")
            broken = _context_broken()
            if broken:
                out.data["error"] = f"CUDA error after config {cfg.name}: {broken}"
                return

    if request.get("timing", True) and all_ok:
        timer = Timer(TimingOptions(**request.get("timing_options", {})))
        baselines = request.get("baselines", ["eager", "compile"])
        timing_configs = request.get("timing_configs")
        for cfg in configs:
            if timing_configs and cfg.name not in timing_configs:
                continue
            out.progress("timing", cfg.name)
            runtime.setup(cfg, cfg.seed, device)
            row: dict[str, Any] = {}
            cand = timer.measure(runtime.candidate_callable(module))
            row["candidate"] = cand.to_json()
            row["hidden_work"] = hidden_work_suspected(cand)
            if "eager" in baselines:
                row["eager"] = timer.measure(runtime.eager_callable()).to_json()
                row["speedup_eager"] = row["eager"]["median_ms"] / cand.median_ms
            if "compile" in baselines:
                try:
                    fn = runtime.compiled_callable()
                    if fn is not None:
                        row["compile"] = timer.measure(fn).to_json()
                        row["speedup_compile"] = row["compile"]["median_ms"] / cand.median_ms
                except Exception as exc:
                    row["compile_error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
            out.data["timing"][cfg.name] = row
            if request.get("integrity", True):  # still correct after the timing loop's many calls?
                from engine.integrity.dynamic import check_after_timing, safe
                out.data.setdefault("integrity", {})[f"{cfg.name}@after-timing"] = safe(
                    check_after_timing, runtime, module, cfg, device)
            out.write()
            broken = _context_broken()
            if broken:
                out.data["error"] = f"CUDA error while timing {cfg.name}: {broken}"
                return


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    out = ResultFile(Path(request["result_path"]))
    out.progress("start")
    try:
        run(request, out)
    except Exception:
        out.data["error"] = "evaluator error: " + traceback.format_exc(limit=6)[-2000:]
    out.data["finished"] = True
    out.data["progress"] = None
    out.write()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
