"""`kbench report SESSION`: a session's results from the workspace alone (notes and candidate.json meta).

Validity by stage, speedups vs eager and torch.compile, fast_p, best-so-far per generation, LLM tokens and
dollars, time per stage; a PNG plot of best and median speedup per generation beside the markdown, drawn with
matplotlib where the `plot` extra is installed (`pip install 'kbench[plot]'`); without it the report says so
in place of the plot and is otherwise the same."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from engine.gpu_wait import waiting_for_gpu
from engine.verdict import BLOCKING, Stage, in_pipeline_order

if TYPE_CHECKING:
    from engine.workspace import CandidateView, Workspace

FAST_P = (0.0, 1.0, 1.5, 2.0)
BEST_COLOR, MEDIAN_COLOR, REFERENCE_COLOR = "#c81e1e", "#1e5ac8", "#bebebe"
PLOT_SIZE = (640, 360)                             # pixels
PLOT_NEEDS = "the plot needs matplotlib, which is not installed: pip install 'kbench[plot]'"


@dataclass
class SessionReport:
    session: str
    task: str
    proposed: int                                  # candidates other than the baseline
    baseline: list[str] = field(default_factory=list)
    stage_counts: dict[str, dict[str, int]] = field(default_factory=dict)  # stage -> {reached, passed}
    baseline_stages: dict[str, str] = field(default_factory=dict)           # stage -> the baseline's status
    eligible: int = 0
    waiting_for_gpu: int = 0                       # candidates (baseline included) compiled, waiting for a GPU
    speedups_eager: list[float] = field(default_factory=list)
    speedups_compile: list[float] = field(default_factory=list)
    measured_eager: list[float] = field(default_factory=list)        # every measured candidate, eligible or not
    measured_compile: list[float] = field(default_factory=list)
    best_id: str | None = None
    best_eager: float | None = None
    best_compile: float | None = None
    fast_p: dict[float, float] = field(default_factory=dict)           # over proposed candidates
    fast_p_compile: dict[float, float] = field(default_factory=dict)
    generations: list[dict[str, Any]] = field(default_factory=list)    # {generation, candidates, eligible, best, median, best_so_far}
    tokens: dict[str, int] = field(default_factory=dict)               # every call's: input, output, cache, total
    usd: dict[str, float] = field(default_factory=dict)                # proposals, verifiers, directives, total
    calls: dict[str, int] = field(default_factory=dict)                # LLM calls billed, by the same kinds
    seconds: dict[str, float] = field(default_factory=dict)            # build, gpu, evaluation (summed)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["fast_p"] = {str(k): v for k, v in self.fast_p.items()}
        d["fast_p_compile"] = {str(k): v for k, v in self.fast_p_compile.items()}
        return d


def _fast_p(values: list[float | None], proposed: int) -> dict[float, float]:
    """fast_p: the share of proposed candidates that are correct (eligible) and faster than p times."""
    if not proposed:
        return {p: 0.0 for p in FAST_P}
    return {p: sum(1 for v in values if v is not None and v > p) / proposed for p in FAST_P}


def build_report(ws: Workspace, session: str) -> SessionReport:
    info = ws.session(session)
    views = ws.candidates(session, strict=False)
    base = [v for v in views if v.record.operator == "baseline"]
    props = [v for v in views if v.record.operator != "baseline"]
    rep = SessionReport(session=session, task=info.task, proposed=len(props),
                        baseline=[v.id for v in base])
    order = in_pipeline_order({s for v in views for s in v.status.stages})
    for stage in order:
        reached = [v for v in props if stage in v.status.stages]
        at_base = [v.status.stages[stage].status.value for v in base if stage in v.status.stages]
        if reached or at_base:
            rep.stage_counts[stage] = {"reached": len(reached),
                                       "passed": sum(1 for v in reached if v.status.stages[stage].status not in BLOCKING)}
        if at_base:
            rep.baseline_stages[stage] = ", ".join(at_base)
    rep.waiting_for_gpu = sum(1 for v in views if waiting_for_gpu(v.status))
    elig = [v for v in props if v.status.eligible]
    rep.eligible = len(elig)
    rep.speedups_eager = [v.status.speedup for v in elig if v.status.speedup is not None]
    rep.speedups_compile = [v.status.speedup_compile for v in elig if v.status.speedup_compile is not None]
    rep.measured_eager = [v.status.speedup for v in props if v.status.speedup is not None]
    rep.measured_compile = [v.status.speedup_compile for v in props if v.status.speedup_compile is not None]
    best = max(elig, key=lambda v: v.status.speedup or 0.0, default=None)
    if best is not None:
        rep.best_id, rep.best_eager, rep.best_compile = best.id, best.status.speedup, best.status.speedup_compile
    rep.fast_p = _fast_p([v.status.speedup for v in elig], len(props))
    rep.fast_p_compile = _fast_p([v.status.speedup_compile for v in elig], len(props))

    best_so_far: float | None = None
    gens: dict[int, list[Any]] = {}
    for v in views:
        gens.setdefault(v.generation, []).append(v)
    for g in sorted(gens):
        sp = [v.status.speedup for v in gens[g] if v.status.eligible and v.status.speedup is not None]
        if sp:
            best_so_far = max(sp) if best_so_far is None else max(best_so_far, max(sp))
        rep.generations.append({"generation": g, "candidates": len(gens[g]), "eligible": len(sp),
                                "best": max(sp) if sp else None, "median": statistics.median(sp) if sp else None,
                                "best_so_far": best_so_far})

    llm = _LLMUse()
    secs = {"build": 0.0, "gpu": 0.0, "evaluation": 0.0, "profile": 0.0}
    for v in views:
        try:
            meta = ws.files(v.id).meta
        except Exception:  # noqa: BLE001 - a damaged commit costs nothing in the report
            meta = {}
        llm.add("proposals", meta)
        review = v.status.stages.get(Stage.LLM_VERIFY)
        if review is not None and review.verdict is not None:
            for vote in review.verdict.verdict.data.get("votes") or ():
                llm.add("verifiers", vote.get("data") or {})
        prof = v.status.stages.get(Stage.PROFILE)
        profile_s = float(prof.verdict.verdict.data.get("seconds") or 0.0) if prof and prof.verdict else 0.0
        evaluated_build = gpu_s = evaluated_s = 0.0
        for e in v.status.events:
            if e.event == "directives":
                llm.add("directives", e.data)
            elif e.event == "evaluated":
                evaluated_build += float(e.data.get("build_s") or 0.0)
                gpu_s += float(e.data.get("gpu_s") or 0.0)
                evaluated_s += float(e.data.get("seconds") or 0.0)
        # the same builds, counted from their verdicts (which evaluations without a GPU leave) or their events
        build_s = max(evaluated_build, _build_seconds(ws, v))
        secs["build"] += build_s
        secs["gpu"] += gpu_s
        secs["profile"] += profile_s
        # what the evaluations took in all: their own clock where they finished, never less than their builds and
        # GPU time (a build on a machine without a GPU ends without an `evaluated` event, and without its clock)
        secs["evaluation"] += max(evaluated_s, build_s + gpu_s)
    session_events = getattr(ws, "session_events", None)
    for e in session_events(session) if session_events is not None else ():
        if e.event == "proposal_failed":        # paid for, produced no candidate (engine/evolve/recorder.py)
            llm.add("failed_proposals", e.data)
        elif e.event == "directives":           # written before anything was measured
            llm.add("directives", e.data)
    rep.tokens, rep.usd, rep.calls = llm.totals()
    rep.seconds = secs
    return rep


class _LLMUse:
    """Tokens, dollars and calls of every LLM call the workspace records: each proposal's (candidate.json meta),
    each verifier vote's, each directives answer's, each failed proposal's (the session's note)."""

    KINDS = ("proposals", "verifiers", "directives", "failed_proposals")
    TOKENS = ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens")

    def __init__(self) -> None:
        self.tokens = dict.fromkeys(self.TOKENS, 0)
        self.usd = dict.fromkeys(self.KINDS, 0.0)
        self.calls = dict.fromkeys(self.KINDS, 0)

    def add(self, kind: str, data: dict[str, Any]) -> None:
        usage = data.get("usage") or {}
        counts = {k: int(usage.get(k) or 0) for k in self.TOKENS}
        cost = float(data.get("cost_usd") or 0.0)
        for k, n in counts.items():
            self.tokens[k] += n
        self.usd[kind] += cost
        if any(counts.values()) or cost:        # a call the API answered (one that was never sent costs nothing)
            self.calls[kind] += 1

    def totals(self) -> tuple[dict[str, int], dict[str, float], dict[str, int]]:
        return ({**self.tokens, "total": sum(self.tokens.values())}, {**self.usd, "total": sum(self.usd.values())},
                {**self.calls, "total": sum(self.calls.values())})


def _build_seconds(ws: Workspace, view: CandidateView) -> float:
    """Every compile of the candidate (each evaluation's `compile` verdict carries its build time; a cache hit
    costs ~0), whether or not an `evaluated` event followed: on a machine without a GPU none does, and the
    builds are most of the time spent."""
    try:
        entries = ws.notes(view.id)
    except Exception:  # noqa: BLE001 - a damaged note: the latest verdict is all there is
        latest = view.status.stages.get(Stage.COMPILE)
        return float(latest.verdict.verdict.data.get("seconds") or 0.0) if latest and latest.verdict else 0.0
    return sum(float(e.verdict.data.get("seconds") or 0.0) for e in entries
               if e.kind == "verdict" and e.verdict.stage == Stage.COMPILE)


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _stats(best: float | None, eligible: list[float], measured: list[float]) -> str:
    med = f"{statistics.median(eligible):.2f}x" if eligible else "-"
    return f"{_x(best)} | {med} | {_x(max(measured) if measured else None)}"


def to_markdown(rep: SessionReport, plot_name: str | None = None, no_plot: str | None = None) -> str:
    """The report as markdown; `plot_name`: the PNG beside it, else `no_plot`: why a plot is missing."""
    out = [f"# Session report: {rep.session}", "", f"Task `{rep.task}`; {rep.proposed} candidates proposed"
           + (f" (plus baseline {', '.join(rep.baseline)})" if rep.baseline else "") + f", {rep.eligible} eligible"
           + (f" ({rep.eligible / rep.proposed:.0%})" if rep.proposed else "") + ".", "",
           "## Validity by stage", ""]
    if rep.waiting_for_gpu:
        out += [f"{rep.waiting_for_gpu} candidate(s) compiled and waiting for a GPU: correctness and timing not "
                "measured yet (run the session's command on a machine with a GPU).", ""]
    head = "| stage | reached | passed | passed / proposed |" + (" baseline |" if rep.baseline else "")
    out += [head, "| --- | --- | --- | --- |" + (" --- |" if rep.baseline else "")]
    for stage, c in rep.stage_counts.items():
        share = f"{c['passed'] / rep.proposed:.0%}" if rep.proposed else "-"
        extra = f" {rep.baseline_stages.get(stage, '-')} |" if rep.baseline else ""
        out.append(f"| {stage} | {c['reached']} | {c['passed']} | {share} |{extra}")
    if not rep.stage_counts:
        out.append("| (no stage has run yet) | | | |" + (" |" if rep.baseline else ""))
    out += ["", "## Speedup", "", (f"Best candidate: {rep.best_id or '(none eligible)'}: {_x(rep.best_eager)} vs eager, "
             f"{_x(rep.best_compile)} vs torch.compile."), "", "| vs | best (eligible) | median (eligible) | max (any measured) |", "| --- | --- | --- | --- |",
            f"| eager | {_stats(rep.best_eager, rep.speedups_eager, rep.measured_eager)} |",
            f"| torch.compile | {_stats(rep.best_compile, rep.speedups_compile, rep.measured_compile)} |", "",
            "## fast_p (share of proposed candidates correct and faster than p times)", "",
            "| p | " + " | ".join(f"{p:g}" for p in FAST_P) + " |", "| --- |" + " --- |" * len(FAST_P),
            "| vs eager | " + " | ".join(f"{rep.fast_p[p]:.0%}" for p in FAST_P) + " |",
            "| vs torch.compile | " + " | ".join(f"{rep.fast_p_compile[p]:.0%}" for p in FAST_P) + " |", "",
            "## Generations", "", "| generation | candidates | eligible | best | median | best so far |",
            "| --- | --- | --- | --- | --- | --- |"]
    for g in rep.generations:
        out.append(f"| {g['generation']} | {g['candidates']} | {g['eligible']} | {_x(g['best'])} | {_x(g['median'])} "
                   f"| {_x(g['best_so_far'])} |")
    if plot_name:
        out += ["", f"![best (red) and median (blue) speedup vs eager per generation; grey: 1.0x]({plot_name})"]
    elif no_plot:
        out += ["", f"No plot of speedup per generation: {no_plot}."]
    t, u, s, n = rep.tokens, rep.usd, rep.seconds, rep.calls
    out += ["", "## LLM usage", "", (f"- calls: {n.get('total', 0)} (proposals {n.get('proposals', 0)}, verifiers "
             f"{n.get('verifiers', 0)}, directives {n.get('directives', 0)}, failed proposals "
             f"{n.get('failed_proposals', 0)})"),
            (f"- tokens, every call: {t.get('input_tokens', 0)} in, {t.get('output_tokens', 0)} out, "
             f"{t.get('cache_write_tokens', 0)} cache write, {t.get('cache_read_tokens', 0)} cache read"),
            (f"- dollars: ${u.get('total', 0):.4f} (proposals ${u.get('proposals', 0):.4f}, verifiers "
             f"${u.get('verifiers', 0):.4f}, directives ${u.get('directives', 0):.4f}, failed proposals "
             f"${u.get('failed_proposals', 0):.4f})"), "",
            "## Time per stage", "", f"- build: {s.get('build', 0):.1f} s", f"- GPU (correctness + timing): {s.get('gpu', 0):.1f} s",
            f"- profile: {s.get('profile', 0):.1f} s",
            f"- evaluation in all (build, GPU and profile): {s.get('evaluation', 0):.1f} s", ""]
    return "\n".join(out)


class WrittenReport(NamedTuple):
    markdown: Path
    plot: Path | None
    no_plot: str | None           # why there is no plot (None when there is one)


def plot_generations(rep: SessionReport, path: Path) -> Path | None:
    """Best (red) and median (blue) eligible speedup vs eager per generation, with a grey 1.0x line, as a
    640x360 PNG at `path`; None where matplotlib (the `plot` extra) is not installed.

    Drawn on a Figure with its own Agg canvas, not through pyplot: no backend is selected, no figure is
    registered in pyplot's global list and no rcParams change, so a report written from inside the app (or
    any other matplotlib user in the process) leaves their state as it was."""
    try:  # lazy: matplotlib is the optional `plot` extra, and slow to import
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    gens = [g["generation"] for g in rep.generations]
    nan = float("nan")                  # a generation with no eligible speedup: a gap in the line
    dpi = 100
    fig = Figure(figsize=(PLOT_SIZE[0] / dpi, PLOT_SIZE[1] / dpi), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.axhline(1.0, color=REFERENCE_COLOR, linewidth=1, zorder=1, label="1.0x (eager)")
    for key, color in (("best", BEST_COLOR), ("median", MEDIAN_COLOR)):
        ax.plot(gens, [nan if g[key] is None else g[key] for g in rep.generations], color=color,
                marker="o", linewidth=2, label=f"{key} (eligible)", zorder=2)
    ax.set_xlabel("generation")
    ax.set_ylabel("speedup vs eager")
    ax.set_xticks(gens)
    ax.set_ylim(bottom=0)
    ax.set_title(f"{rep.session} ({rep.task})")
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})    # no version stamp: the same data, the same file
    return path


def write_report(rep: SessionReport, out: Path | str) -> WrittenReport:
    """The markdown at `out` and the plot beside it (`<stem>.png`). No plot when no generation has an eligible
    speedup, or when matplotlib is not installed: `no_plot` says which, and the markdown says how to get one."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    png: Path | None = None
    no_plot: str | None = None
    if not any(g["best"] is not None for g in rep.generations):
        no_plot = "no generation has a measured speedup"
    else:
        png = plot_generations(rep, out.with_suffix(".png"))
        if png is None:
            no_plot = PLOT_NEEDS
    # only a missing extra is worth a line in the report: with nothing measured there is nothing to plot
    out.write_text(to_markdown(rep, png.name if png else None, no_plot if no_plot == PLOT_NEEDS else None))
    return WrittenReport(out, png, no_plot)
