"""The static reward-hack scan runs once per evolution candidate: the loop runs it before submitting
(engine/evolve/checks.py) and its evaluation leaves it out (EvalOptions.static_gate), where it used to scan again
under a person's-override flag and drop the second verdict. `kbench eval` still gates on it itself. Build and
judge are the stand-ins of the `judged` fixture."""

from __future__ import annotations

import engine.pipeline.evaluate as evaluate_mod
from engine.candidates import load_candidate
from engine.evolve.worker_fns import default_gpu
from engine.pipeline.eval_types import EvalOptions
from engine.tasks.loader import load_task
from engine.verdict import Stage
from tests.paths import REPO

GELU = REPO / "tasks" / "gelu_bias" / "baselines" / "forward"


def test_an_evolutions_evaluation_leaves_the_static_stage_to_the_loop(judged, monkeypatch):
    scans = []
    real = evaluate_mod.gate_static

    def counted(*a, **kw):
        scans.append(a[1].source_hash)
        return real(*a, **kw)
    monkeypatch.setattr(evaluate_mod, "gate_static", counted)
    task, cand = load_task("gelu_bias"), load_candidate(GELU)
    opts = EvalOptions(profile=False, roofline=False)

    out = default_gpu(task, cand, "forward", opts, warm=False)
    assert scans == [] and len(judged) == 1                       # judged, never scanned here
    assert Stage.STATIC not in {v.stage for v in out.verdicts}
    assert opts.override_static is False                           # a person's override is not borrowed for it

    rep = evaluate_mod.evaluate(task, cand, "forward", opts)       # kbench eval: the gate is its own
    assert scans == [cand.source_hash] and Stage.STATIC in {v.stage for v in rep.verdicts}
