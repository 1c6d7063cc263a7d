"""The parts of an exported package's README and export.json that say where its kernels came from: provenance,
verdicts, measurements. Shared by the op package (engine/export/writer.py) and the KernelBench ModelNew package
(engine/export/kernelbench.py); `plan` is either plan type (both have task, forward and backward)."""

from __future__ import annotations

from typing import Any

from engine.export.kernel_source import KernelSource


def kernel_json(k: KernelSource) -> dict[str, Any]:
    return {"origin": k.origin, "format": k.candidate.format, "files": sorted(k.candidate.files),
            "source_hash": k.candidate.source_hash, "entry": k.entry.function, "candidate": k.candidate_id,
            "commit": k.commit, "session": k.session, "passing": k.passing,
            "why_not_passing": k.why_not_passing or None, "status": k.status}


def provenance(plan: Any) -> str:
    lines = [f"- Task: `{plan.task.name}` ({plan.task.format}), {len(plan.task.configs)} configs"]
    for k in (plan.forward, plan.backward):
        if k is None:
            continue
        lines.append(f"- {k.direction.capitalize()} kernel: {k.origin}; {k.candidate.format} format, "
                     f"source hash `{k.candidate.source_hash}`, entry point `{k.entry.function}`")
        meta = k.candidate.meta or {}
        if k.session:
            extra = [f"session `{k.session}`"]
            for key in ("operator", "proposer", "model"):
                if meta.get(key):
                    extra.append(f"{key} `{meta[key]}`")
            lines.append("  (" + ", ".join(extra) + ")")
    return "\n".join(lines)


def verdicts(plan: Any) -> str:
    parts = []
    for k in (plan.forward, plan.backward):
        if k is None:
            continue
        head = f"**{k.direction}** — " + ("passing" if k.passing else f"NOT passing: {k.why_not_passing}")
        stages = (k.status or {}).get("stages") or {}
        if not stages:
            parts.append(head + "\n\nNo verdicts recorded" + (
                " (a shipped baseline: tests/pipeline/test_gpu_baselines.py checks it on every config)." if k.passing
                else "."))
            continue
        rows = ["| stage | status | reason |", "| --- | --- | --- |"]
        for stage, st in stages.items():
            mark = " (override)" if st.get("override") else ""
            reason = str(st.get("reason") or "").replace("|", "\\|").replace("\n", " ")
            rows.append(f"| {stage} | {st.get('status')}{mark} | {reason} |")
        parts.append(head + "\n\n" + "\n".join(rows))
    return "\n\n".join(parts)


def _fmt(v: Any, spec: str = ".3g", suffix: str = "") -> str:
    return "—" if v is None else f"{v:{spec}}{suffix}"


def measurements(plan: Any) -> str:
    parts = []
    for k in (plan.forward, plan.backward):
        if k is None:
            continue
        m = (k.status or {}).get("measurement")
        if not m:
            parts.append(f"**{k.direction}** — no measurement recorded.")
            continue
        where = ", ".join(x for x in (m.get("gpu"), m.get("driver") and f"driver {m['driver']}",
                                       m.get("torch") and f"torch {m['torch']}",
                                       m.get("cuda") and f"CUDA {m['cuda']}", m.get("at")) if x)
        head = (f"**{k.direction}** — speedup {_fmt(m.get('speedup_eager'), '.2f', 'x')} over eager PyTorch, "
                f"{_fmt(m.get('speedup_compile'), '.2f', 'x')} over torch.compile (geomeans over the timed "
                "configs below; correctness covers every config)"
                + (f"; {where}" if where else ""))
        rows = ["| config | kernel ms | eager ms | compile ms | vs eager |", "| --- | --- | --- | --- | --- |"]
        for c in m.get("configs") or []:
            sp = c["eager_ms"] / c["ms"] if c.get("eager_ms") and c.get("ms") else None
            rows.append(f"| {c.get('config')} | {_fmt(c.get('ms'), '.4g')} | {_fmt(c.get('eager_ms'), '.4g')} | "
                        f"{_fmt(c.get('compile_ms'), '.4g')} | {_fmt(sp, '.2f', 'x')} |")
        parts.append(head + "\n\n" + "\n".join(rows))
    return "\n\n".join(parts)
