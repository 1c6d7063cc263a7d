"""Verdict policy, in one place: from the judge's result to the `correctness`, `timing` and `integrity`
verdicts of an EvalReport. The judge decides what it measured; this module decides what that means."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from engine import jsonable
from engine.gpu_wait import NO_GPU
from engine.harness.roofline import FLOOR_MARGIN, get_peaks
from engine.pipeline.eval_types import ConfigRow, EvalOptions, EvalReport
from engine.pipeline.protocol.result import JudgeOutcome, JudgeResult
from engine.tasks.model import ALL_CONFIGS, Cost, Task, timing_selection
from engine.verdict import Stage, Status, Verdict

NO_GPU_REASON = "no CUDA GPU is visible: correctness and timing need a GPU (compiled fine)"
# The share of a counted cost (FlopCounterMode's FLOPs, every argument's and output's bytes) that makes the floor of a
# task without a cost model: counted against the built-in tasks' own models, counts ran up to 1.9x over them (SDPA's
# causal mask, a rotary gradient that never reads x), never under.
COUNTED_SHARE = 0.5


@dataclass(frozen=True)
class Roofline:
    """Where the candidate's times sit against the GPU's measured peaks (the parent's reading of the judge's
    timings): per timed config its physical floor and the fraction of it reached."""
    peaks: dict[str, Any] | None = None      # as the timing verdict's data and the profile stage show them
    error: str | None = None                 # the peaks could not be measured
    floor_ms: dict[str, float] = field(default_factory=dict)
    fraction: dict[str, float] = field(default_factory=dict)


def roofline(result: JudgeResult, task: Task, direction: str, cache_root: Path, gpu: int | None,
             say: Callable[[str], None] = lambda m: None) -> Roofline | None:
    """The roofline placement of each timed config of the judge's result (None when nothing was timed)."""
    if not result.timing or result.device is None or not result.device.gpu:
        return None
    say("placing results on the roofline")
    try:
        peaks = get_peaks(cache_root, result.device.gpu, device=gpu)
    except RuntimeError as exc:
        return Roofline(error=str(exc))
    out = Roofline({"gpu": peaks.gpu, "copy_gbps": peaks.copy_gbps, "fp32_tflops": peaks.fp32_tflops,
                    "tf32_tflops": peaks.tf32_tflops})
    costs = {c.name: c.cost.get(direction) for c in task.configs}
    for name, row in result.timing.items():
        # the task's cost model, else the judge's count of the reference (engine/harness/cost_count.py), of which
        # COUNTED_SHARE: a count can overstate what a kernel must do (a causal mask's skipped blocks, an argument
        # the gradient never reads), and a floor must never accuse an honest kernel
        cost = costs.get(name)
        if cost is None and (counted := result.cost.get(name)) is not None:
            cost = Cost(counted.flops * COUNTED_SHARE, counted.bytes * COUNTED_SHARE)
        if cost is not None and row.candidate is not None:
            out.floor_ms[name] = peaks.floor_ms(cost)
            out.fraction[name] = peaks.fraction(cost, row.candidate.median_ms)
    return out


def _passed_with_notes(report: EvalReport) -> str:
    """What the judge said of configs that passed in a way worth reading (calls that only the float64 reference
    took: engine/pipeline/judge/exact.py)."""
    noted = [r for r in report.rows if r.correct and r.reason]
    if not noted:
        return ""
    more = f" (and {len(noted) - 1} more configs)" if len(noted) > 1 else ""
    return f"; {noted[0].name}: {noted[0].reason}{more}"


def fill_report(report: EvalReport, task: Task, opts: EvalOptions, outcome: JudgeOutcome,
                roof: Roofline | None = None) -> None:
    """Rows and the correctness / timing verdicts, from what the judge wrote (however it ended)."""
    res = outcome.result
    report.device = res.device.as_report() if res.device else {}
    report.jail = res.jail.to_json() if res.jail else {}
    report.numerics = res.numerics.to_json() if res.numerics else {}
    report.memory = {name: jsonable.dump(m) for name, m in res.memory.items()}
    report.traces = dict(res.traces)
    correctness, timing = res.correctness, res.timing
    names = [c.name for c in task.configs if not opts.configs or c.name in opts.configs]
    timed = timing_selection(task, opts.timing_configs, opts.configs)   # what the judge was asked to time
    if opts.timing:
        report.timed_by = ("default" if not opts.timing_configs else
                           "all" if ALL_CONFIGS in opts.timing_configs else "named")
    for name in names:
        row = ConfigRow(name, timed=opts.timing and (timed is None or name in timed))
        if (c := correctness.get(name)) is not None:
            row.correct, row.reason, row.max_abs_err = c.ok, c.reason, c.max_abs_err
        row.mutated_by_reference = list(res.mutated.get(name, []))
        if (t := timing.get(name)) is not None and t.candidate is not None:
            row.candidate_ms, row.candidate_iqr_ms = t.candidate.median_ms, t.candidate.iqr_ms
            row.eager_ms = t.eager.median_ms if t.eager else None
            row.compile_ms = t.compile.median_ms if t.compile else None
            row.speedup_eager, row.speedup_compile = t.speedup_eager, t.speedup_compile
            row.hidden_work = t.hidden_work
            row.baselines = t.baselines.source if t.baselines else ""
            if roof is not None:
                row.floor_ms, row.roofline_fraction = roof.floor_ms.get(name), roof.fraction.get(name)
        report.rows.append(row)

    error = res.error
    if error == NO_GPU or res.unmeasured:
        report.unmeasured = NO_GPU if error == NO_GPU else res.unmeasured
        why = NO_GPU_REASON if error == NO_GPU else report.unmeasured
        report.verdicts.append(Verdict(Stage.CORRECTNESS, Status.SKIPPED, why))
        report.verdicts.append(Verdict(Stage.TIMING, Status.SKIPPED, why))
        return
    failed = [r for r in report.rows if r.correct is False]
    if outcome.crashed or error:
        cause = error or outcome.describe_crash()
        if outcome.crashed and error:
            cause = f"{error} ({outcome.describe_crash()})"
        stage = res.progress.stage if res.progress else None
        timing_failed = [n for n, t in timing.items() if t.error is not None]
        if (stage == Stage.TIMING or timing_failed) and report.rows and all(r.correct for r in report.rows):
            report.verdicts.append(Verdict(Stage.CORRECTNESS, Status.PASS, "all configs within tolerance",
                                           correctness_data(report)))
            report.verdicts.append(Verdict(Stage.TIMING, Status.FAIL, cause))
            return
        running = res.progress.config if res.progress else None
        for r in report.rows:
            if r.name == running and r.correct is None:
                r.correct, r.reason = False, cause
        if failed:
            cause = f"{failed[0].name}: {failed[0].reason}" if not error else cause
        report.verdicts.append(Verdict(Stage.CORRECTNESS, Status.FAIL, cause, correctness_data(report)))
        report.verdicts.append(Verdict(Stage.TIMING, Status.SKIPPED, "correctness failed"))
        return
    if failed:
        first = failed[0]
        report.verdicts.append(Verdict(
            Stage.CORRECTNESS, Status.FAIL,
            f"{len(failed)} of {len(report.rows)} configs fail; {first.name}: {first.reason}",
            correctness_data(report)))
        report.verdicts.append(Verdict(Stage.TIMING, Status.SKIPPED, "correctness failed"))
        return
    mutated = sorted({k for r in report.rows for k in r.mutated_by_reference})
    report.verdicts.append(Verdict(Stage.CORRECTNESS, Status.PASS,
                                   f"{len(report.rows)} configs x {opts.trials} trials within tolerance"
                                   + (f" (inputs {', '.join(map(str, mutated))} mutated in place by the reference, "
                                      "compared after each call)" if mutated else "") + _passed_with_notes(report),
                                   correctness_data(report)))
    if not opts.timing:
        report.verdicts.append(Verdict(Stage.TIMING, Status.SKIPPED, "timing not requested"))
        return
    timing_errors = {n: t.error for n, t in timing.items() if t.error is not None}
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
                                 "witness": timing[r.name].witness if r.name in timing else None}
                        for r in report.rows},
            "timed": [r.name for r in report.rows if r.candidate_ms is not None],
            "not_timed": [r.name for r in report.rows if not r.timed], "timed_by": report.timed_by,
            "peaks": roof.peaks if roof else None,
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
    """The correctness verdict's data: each config's result (and the inputs its reference mutates in place, which
    were compared after each call), and the numeric settings both sides ran under."""
    return {"configs": {r.name: {"ok": r.correct, "reason": r.reason, "max_abs_err": r.max_abs_err,
                                 **({"mutated_by_reference": r.mutated_by_reference} if r.mutated_by_reference else {})}
                        for r in report.rows}, "numerics": report.numerics}


def integrity_verdict(result: JudgeResult) -> Verdict | None:
    """The `integrity` verdict from the judge's per-config findings (None when it checked nothing)."""
    per = result.integrity
    if not per:
        return None
    data = {"configs": {name: jsonable.dump(r) for name, r in per.items()}, "fresh": dict(result.fresh)}
    bad = {name: r for name, r in per.items() if not r.ok}
    if bad:
        name, r = next(iter(bad.items()))
        hacks = sorted({str(x.hack) for x in bad.values()})
        return Verdict(Stage.INTEGRITY, Status.FAIL, f"reward hack ({', '.join(hacks)}) on {name}: {r.reason}", data)
    return Verdict(Stage.INTEGRITY, Status.PASS, f"integrity checks passed on {len(per)} config(s)", data)
