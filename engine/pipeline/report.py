"""Render an EvalReport as the per-config table and summary that `kbench eval` prints."""

from __future__ import annotations

from engine.pipeline.baseline_cache import describe as describe_baselines
from engine.pipeline.eval_types import EvalReport
from engine.tasks.model import DEFAULT_TIMING_NOTE
from engine.verdict import Stage, Status, Verdict

# Why a correct config has no timings, by EvalReport.timed_by
WHY_NOT_TIMED = {"default": DEFAULT_TIMING_NOTE, "named": "only the configs named with --time-config are timed"}


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:.1f}us" if v < 0.1 else f"{v:.3f}ms"


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v else "-"


def render(report: EvalReport) -> str:
    mode = (report.mode or {}).get("mode", "kbench")
    lines = [f"{report.task} [{report.direction}]  candidate {report.candidate} ({report.format})"
             + (f"  mode {mode}" if mode != "kbench" else "")]
    dev = report.device or {}
    if dev.get("gpu"):
        lines.append(f"  on {dev['gpu']} (driver {dev.get('driver') or '?'}, torch {dev.get('torch')}, "
                     f"CUDA {dev.get('cuda')})")
    if report.rows:
        w = max(len(r.name) for r in report.rows)
        lines.append("")
        lines.append(f"  {'config':<{w}}  {'correct':<7} {'max err':>9} {'kernel':>10} {'eager':>10} "
                     f"{'compile':>10} {'vs eager':>8} {'vs comp.':>8} {'roofline':>8}")
        for r in report.rows:
            ok = {True: "yes", False: "NO", None: "-"}[r.correct]
            err = f"{r.max_abs_err:.2e}" if r.max_abs_err is not None else "-"
            if not r.timed and report.timed_by and r.candidate_ms is None:
                lines.append(f"  {r.name:<{w}}  {ok:<7} {err:>9} {'not timed':>10}")
            else:
                lines.append(f"  {r.name:<{w}}  {ok:<7} {err:>9} {_ms(r.candidate_ms):>10} {_ms(r.eager_ms):>10} "
                             f"{_ms(r.compile_ms):>10} {_x(r.speedup_eager):>8} {_x(r.speedup_compile):>8} "
                             f"{(f'{r.roofline_fraction:.0%}' if r.roofline_fraction else '-'):>8}")
            if r.correct is False and r.reason:
                lines.append(f"  {'':<{w}}  ↳ {r.reason}")
        untimed = [r for r in report.rows if not r.timed]
        if untimed and report.timed_by in WHY_NOT_TIMED:
            lines.append(f"  {len(untimed)} of {len(report.rows)} configs not timed "
                         f"({WHY_NOT_TIMED[report.timed_by]})")
    lines.append("")
    lines += [_verdict_line(v) for v in report.verdicts]
    if (profiled := render_profile(report)):
        lines.append(profiled)
    if report.geomean_speedup_eager:
        timed = [r.name for r in report.rows if r.speedup_eager]
        over = "" if len(timed) == len(report.rows) else (f" (over {', '.join(timed)})" if len(timed) <= 4 else
                                                          f" (over {len(timed)} of {len(report.rows)} configs)")
        lines.append(f"\n  geomean speedup: {_x(report.geomean_speedup_eager)} vs eager, "
                     f"{_x(report.geomean_speedup_compile)} vs torch.compile{over}")
    lines += [f"  {line}" for line in describe_baselines(report.baselines)]
    build = report.build
    if build:
        lines.append(f"  build {build.get('seconds', 0):.1f}s{' (cache hit)' if build.get('cache_hit') else ''}"
                     f"{_judge_time(report.phases)}, total {report.seconds:.1f}s")
    j = report.judgement
    if j.passed:
        outcome = "PASS"
    elif j.not_checked:
        outcome = "COMPILED, NOT CHECKED (correctness and timing need a GPU)"
    elif j.blocked_by and all(report.verdict(s).status is Status.SUSPICIOUS for s in j.blocked_by):
        outcome = (f"SUSPICIOUS ({', '.join(j.blocked_by)}): a person must confirm before it counts as passing")
    else:
        outcome = "FAIL" + (f" ({j.why_not_passed})" if not j.blocked_by and j.why_not_passed else "")
    lines.append(f"  => {outcome}")
    compile_v = report.verdict(Stage.COMPILE)
    if compile_v and compile_v.status is Status.FAIL and compile_v.data.get("log"):
        lines.append("\ncompiler output (tail):\n" + compile_v.data["log"][-3000:])
    return "\n".join(lines)


def render_profile(report: EvalReport, verdict: bool = False) -> str:
    """The profile stage's summary, indented ("" where there is none); `verdict`: its verdict line first (for a
    profile shown after the rest of the report, as `kbench eval --profile` does)."""
    profile = report.verdict(Stage.PROFILE)
    if profile is None:
        return ""
    lines = [_verdict_line(profile)] if verdict else []
    if profile.data.get("text"):
        lines += ["", *(f"  {line}" for line in str(profile.data["text"]).splitlines())]
    return "\n".join(lines)


def _verdict_line(v: Verdict) -> str:
    return f"  {v.stage:<12} {v.status.value.upper():<10} {v.reason}"


# the judge's phases worth a word on the time line, as EvalReport.phases names them
JUDGE_PHASES = (("judge.judge_start", "start"), ("judge.task_setup", "task setup"), ("judge.check", "checks"),
                ("judge.timing", "timing"), ("judge.baselines", "baselines"))


def _judge_time(phases: dict[str, float]) -> str:
    """", judge 6.2s (start 3.1, task setup 1.2, checks 0.4, timing 0.9, baselines 0.1)": where the time went."""
    if "judge" not in phases:
        return ""
    parts = [f"{label} {phases[k]:.1f}" for k, label in JUDGE_PHASES if k in phases]
    return f", judge {phases['judge']:.1f}s" + (f" ({', '.join(parts)})" if parts else "")
