"""kbench's baselines against robust-kbench's published kernels, on robust-kbench's own configs, in one run.

    python scripts/bench_vs_published.py CHECKOUT [--tasks mnist_linear:forward,llama_rmsnorm:forward] [--json F]

CHECKOUT is a robust-kbench checkout with `highlighted/<task>/<direction>/kernel.cu`. For each task direction,
one process evaluates, one after the other on the same GPU: kbench's built-in baseline, then the published
kernel unmodified, each with correctness on the built-in task's `rkb-*` configs (robust-kbench's own settings)
and timing of every one of them against eager. The published kernel is measured even where kbench's static
scan would stop it (`override_static`, as a person's override would): this compares speed, the verdicts are
printed beside it. Per config: candidate ms, eager ms, speedup; per kernel: the geometric mean.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.candidates import load_candidate  # noqa: E402
from engine.harness.stats import geomean  # noqa: E402
from engine.pipeline.evaluate import EvalOptions, evaluate  # noqa: E402
from engine.tasks.loader import load_task  # noqa: E402


def measure(task_name: str, direction: str, checkout: Path) -> list[dict]:
    task = load_task(task_name)
    configs = [c.name for c in task.configs if c.name.startswith("rkb-")]
    if not configs:
        raise SystemExit(f"{task_name} has no rkb-* configs")
    opts = EvalOptions(configs=configs, timing_configs=configs, trials=1, baselines=("eager",), profile=False,
                       override_static=True)
    rows = []
    for who, path in (("kbench baseline", task.baseline_dir(direction)),
                      ("robust-kbench published", checkout / "highlighted" / task_name / direction / "kernel.cu")):
        rep = evaluate(task, load_candidate(path), direction, opts)
        per = {r.name: {"candidate_ms": r.candidate_ms, "eager_ms": r.eager_ms, "speedup": r.speedup_eager,
                        "correct": r.correct} for r in rep.rows}
        rows.append({"task": task_name, "direction": direction, "kernel": who, "passed": rep.passed,
                     "verdicts": {v.stage: f"{v.status.value}: {v.reason[:200]}" for v in rep.verdicts},
                     "configs": per, "geomean_speedup": geomean(r.speedup_eager for r in rep.rows)})
        print(f"{task_name} {direction} {who}: passed={rep.passed} geomean={rows[-1]['geomean_speedup']}",
              file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    out = []
    for task in dict.fromkeys((r["task"], r["direction"]) for r in rows):
        pair = [r for r in rows if (r["task"], r["direction"]) == task]
        names = list(pair[0]["configs"])
        out.append(f"{task[0]} {task[1]} | " + " | ".join(names) + " | geomean |")
        out.append("| --- " * (len(names) + 2) + "|")
        for r in pair:
            cells = []
            for n in names:
                c = r["configs"].get(n) or {}
                if c.get("candidate_ms") is None:
                    cells.append("failed" if c.get("correct") is False else "-")
                else:
                    cells.append(f"{c['candidate_ms']:.4f} / {c['eager_ms']:.4f} ms, {c['speedup']:.2f}x")
            g = r["geomean_speedup"]
            out.append(f"| {r['kernel']} | " + " | ".join(cells) + f" | {'-' if g is None else f'{g:.2f}x'} |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", type=Path)
    ap.add_argument("--tasks", default="mnist_linear:forward,llama_rmsnorm:forward")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows: list[dict] = []
    for item in args.tasks.split(","):
        name, direction = item.split(":")
        rows.extend(measure(name, direction, args.checkout))
        if args.json:   # after each task: a run cut short keeps what it measured
            Path(args.json).write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
