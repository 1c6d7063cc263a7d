"""Verdict policy, in one place: from the judge's result to the `correctness`, `timing` and `integrity`
verdicts of an EvalReport. The judge decides what it measured; this module decides what that means."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from engine.pipeline.eval_types import ConfigRow, EvalOptions, EvalReport
from engine.pipeline.types import NO_GPU
from engine.procs import ChildOutcome
from engine.tasks.model import ALL_CONFIGS, Task, timing_selection
from engine.verdict import Stage, Status, Verdict

if TYPE_CHECKING:
    from pathlib import Path

NO_GPU_REASON = "no CUDA GPU is visible: correctness and timing need a GPU (compiled fine)"


def apply_roofline(result: dict[str, Any], task: Task, direction: str, cache_root: "Path", gpu: int | None,
                   say: Callable[[str], None] = lambda m: None) -> None:
    """Add floor_ms, roofline_fraction and bound to each timed config of the judge's result."""
    if not result.get("timing") or not (result.get("device") or {}).get("gpu"):
        return
    from engine.harness.roofline import get_peaks

    say("placing results on the roofline")
    try:
        peaks = get_peaks(cache_root, result["device"]["gpu"], device=gpu)
    except RuntimeError as exc:
        result["roofline_error"] = str(exc)
        return
    result["peaks"] = {"gpu": peaks.gpu, "copy_gbps": peaks.copy_gbps, "fp32_tflops": peaks.fp32_tflops,
                       "tf32_tflops": peaks.tf32_tflops}
    costs = {c.name: c.cost.get(direction) for c in task.configs}
    for name, row in result["timing"].items():
        cost = costs.get(name)
        if cost is not None and "candidate" in row:
            row["floor_ms"] = peaks.floor_ms(cost)
            row["roofline_fraction"] = peaks.fraction(cost, row["candidate"]["median_ms"])
            row["bound"] = peaks.bound(cost)


def fill_report(report: EvalReport, task: Task, opts: EvalOptions, outcome: ChildOutcome) -> None:
    """Rows and the correctness / timing verdicts, from what the judge wrote (however it ended)."""
    res = outcome.result
    report.device = res.get("device") or {}
    report.jail = res.get("jail") or {}
    report.traces = res.get("traces") or {}
    correctness: dict[str, Any] = res.get("correctness") or {}
    timing: dict[str, Any] = res.get("timing") or {}
    names = [c.name for c in task.configs if not opts.configs or c.name in opts.configs]
    timed = timing_selection(task, opts.timing_configs, opts.configs)   # what the judge was asked to time
    if opts.timing:
        report.timed_by = ("default" if not opts.timing_configs else
                           "all" if ALL_CONFIGS in opts.timing_configs else "named")
    for name in names:
        row = ConfigRow(name, timed=opts.timing and (timed is None or name in timed))
        if name in correctness:
            c = correctness[name]
            row.correct, row.reason, row.max_abs_err = bool(c["ok"]), c.get("reason", ""), c.get("max_abs_err")
        if name in timing and "candidate" in timing[name]:
            t = timing[name]
            row.candidate_ms = t["candidate"]["median_ms"]
            row.candidate_iqr_ms = t["candidate"]["iqr_ms"]
            row.eager_ms = (t.get("eager") or {}).get("median_ms")
            row.compile_ms = (t.get("compile") or {}).get("median_ms")
            row.speedup_eager, row.speedup_compile = t.get("speedup_eager"), t.get("speedup_compile")
            row.hidden_work = bool(t.get("hidden_work"))
            row.baselines = (t.get("baselines") or {}).get("from", "")
            row.floor_ms, row.roofline_fraction = t.get("floor_ms"), t.get("roofline_fraction")
        report.rows.append(row)

    error = res.get("error")
    if error == NO_GPU or res.get("unmeasured"):
        report.unmeasured = NO_GPU if error == NO_GPU else str(res["unmeasured"])
        why = NO_GPU_REASON if error == NO_GPU else report.unmeasured
        report.verdicts.append(Verdict(Stage.CORRECTNESS, Status.SKIPPED, why))
        report.verdicts.append(Verdict(Stage.TIMING, Status.SKIPPED, why))
        return
    failed = [r for r in report.rows if r.correct is False]
    if outcome.crashed or error:
        cause = error or outcome.describe_crash()
        if outcome.crashed and error:
            cause = f"{error} ({outcome.describe_crash()})"
        stage = (res.get("progress") or {}).get("stage")
        timing_failed = [n for n, t in timing.items() if "error" in t]
        if (stage == Stage.TIMING or timing_failed) and report.rows and all(r.correct for r in report.rows):
            report.verdicts.append(Verdict(Stage.CORRECTNESS, Status.PASS, "all configs within tolerance",
                                           {"configs": correctness_data(report)}))
            report.verdicts.append(Verdict(Stage.TIMING, Status.FAIL, cause))
            return
        running = (res.get("progress") or {}).get("config")
        for r in report.rows:
            if r.name == running and r.correct is None:
                r.correct, r.reason = False, cause
        if failed:
            cause = f"{failed[0].name}: {failed[0].reason}" if not error else cause
        report.verdicts.append(Verdict(Stage.CORRECTNESS, Status.FAIL, cause, {"configs": correctness_data(report)}))
        report.verdicts.append(Verdict(Stage.TIMING, Status.SKIPPED, "correctness failed"))
        return
    if failed:
        first = failed[0]
        report.verdicts.append(Verdict(
            Stage.CORRECTNESS, Status.FAIL,
            f"{len(failed)} of {len(report.rows)} configs fail; {first.name}: {first.reason}",
            {"configs": correctness_data(report)}))
        report.verdicts.append(Verdict(Stage.TIMING, Status.SKIPPED, "correctness failed"))
        return
    report.verdicts.append(Verdict(Stage.CORRECTNESS, Status.PASS,
                                   f"{len(report.rows)} configs x {opts.trials} trials within tolerance",
                                   {"configs": correctness_data(report)}))
    if not opts.timing:
        report.verdicts.append(Verdict(Stage.TIMING, Status.SKIPPED, "timing not requested"))
        return
    timing_errors = {n: t["error"] for n, t in timing.items() if "error" in t}
    if timing_errors:
        name, why = next(iter(timing_errors.items()))
        report.verdicts.append(Verdict(Stage.TIMING, Status.FAIL, f"{name}: {why}"))
        return
    if not timing:
        report.verdicts.append(Verdict(Stage.TIMING, Status.SKIPPED, "the integrity checks failed: not timed"))
        return
    data = {"configs": {r.name: {"candidate_ms": r.candidate_ms, "iqr_ms": r.candidate_iqr_ms,
                                 "eager_ms": r.eager_ms, "compile_ms": r.compile_ms,
                                 "speedup_eager": r.speedup_eager, "speedup_compile": r.speedup_compile,
                                 "floor_ms": r.floor_ms, "roofline_fraction": r.roofline_fraction,
                                 "witness": (timing.get(r.name) or {}).get("witness")}
                        for r in report.rows},
            "timed": [r.name for r in report.rows if r.candidate_ms is not None],
            "not_timed": [r.name for r in report.rows if not r.timed], "timed_by": report.timed_by,
            "peaks": res.get("peaks"),
            "geomean_speedup_eager": report.geomean_speedup_eager,
            "geomean_speedup_compile": report.geomean_speedup_compile, "device": report.device,
            "jail": (report.jail or {}).get("summary")}
    hidden = [r.name for r in report.rows if r.hidden_work]
    if hidden:
        report.verdicts.append(Verdict(
            Stage.TIMING, Status.SUSPICIOUS,
            f"work continues after the stream's end event on {', '.join(hidden)} (another stream or thread?)",
            data))
        return
    from engine.harness.roofline import FLOOR_MARGIN
    below = [r for r in report.rows if r.floor_ms and r.candidate_ms is not None
             and r.candidate_ms < FLOOR_MARGIN * r.floor_ms]
    if below:
        r = below[0]
        report.verdicts.append(Verdict(
            Stage.TIMING, Status.SUSPICIOUS,
            f"{r.name}: {r.candidate_ms:.4f} ms is below the physical floor {r.floor_ms:.4f} ms "
            "(cost model / measured peaks): work was skipped or the timer was fooled; a person must confirm",
            data))
        return
    g = report.geomean_speedup_eager
    reason = f"geomean speedup vs eager {g:.2f}x" if g else "timed"
    if data["not_timed"]:      # say which configs the speedup is over
        shown = data["timed"]
        reason += (f" over {', '.join(shown)}" if len(shown) <= 3 else
                   f" over {len(shown)} of {len(report.rows)} configs")
    report.verdicts.append(Verdict(Stage.TIMING, Status.PASS, reason, data))


def correctness_data(report: EvalReport) -> dict[str, Any]:
    return {r.name: {"ok": r.correct, "reason": r.reason, "max_abs_err": r.max_abs_err} for r in report.rows}


def integrity_verdict(result: dict[str, Any]) -> Verdict | None:
    """The `integrity` verdict from the judge's per-config findings (None when it checked nothing)."""
    per = result.get("integrity") or {}
    if not per:
        return None
    bad = {name: r for name, r in per.items() if not r.get("ok", True)}
    if bad:
        name, r = next(iter(bad.items()))
        hacks = sorted({str(x.get("hack")) for x in bad.values()})
        return Verdict(Stage.INTEGRITY, Status.FAIL, f"reward hack ({', '.join(hacks)}) on {name}: {r.get('reason')}",
                       {"configs": per})
    return Verdict(Stage.INTEGRITY, Status.PASS, f"integrity checks passed on {len(per)} config(s)", {"configs": per})
