"""Which candidates `kbench reevaluate SESSION` picks without --all: those with a measurement, or whose correctness
is met as engine.verdict.judge reads it (a pass from a check that ran). A person's override to pass over a
correctness check that never ran is not a pass the judge counts, so it is not picked either. CPU only."""

from __future__ import annotations

from dataclasses import replace

from engine.candidates import load_candidate
from engine.config.sections import Config
from engine.service.session_service import SessionService
from engine.verdict import Stage, Status, Verdict
from tests.paths import REPO

LN_FWD = REPO / "tasks" / "layernorm_lastdim" / "baselines" / "forward"


def _commit(ws, n):
    c = load_candidate(LN_FWD)
    files = {k: v + f"\n// variant {n}\n" if k == c.main_file else v for k, v in c.files.items()}
    return ws.commit_candidate("ln", replace(c, files=files)).id


def test_a_session_reevaluates_its_candidates_whose_correctness_the_judge_counts(ln_ws):
    passed_untimed = _commit(ln_ws, 1)  # correctness passed, timing failed: worth measuring again
    ln_ws.record_verdicts(passed_untimed, [Verdict(Stage.COMPILE, Status.PASS, "compiled"),
                                           Verdict(Stage.CORRECTNESS, Status.PASS, "ok"),
                                           Verdict(Stage.TIMING, Status.FAIL, "timing crashed")])
    overridden = _commit(ln_ws, 2)      # correctness never ran (no GPU); a person overrode it to pass
    ln_ws.record_verdicts(overridden, [Verdict(Stage.COMPILE, Status.PASS, "compiled"),
                                       Verdict(Stage.CORRECTNESS, Status.SKIPPED, "no GPU")])
    ln_ws.override(overridden, Stage.CORRECTNESS, "pass", "I trust it", by="newcomer")
    failed = _commit(ln_ws, 3)
    ln_ws.record_verdicts(failed, [Verdict(Stage.COMPILE, Status.PASS, "compiled"),
                                   Verdict(Stage.CORRECTNESS, Status.FAIL, "mismatch")])
    assert ln_ws.status(overridden).status_of(Stage.CORRECTNESS) is Status.PASS  # the stage's status did change

    svc = SessionService(ln_ws, Config())
    _, views = svc.reevaluation_targets("ln")
    assert [v.id for v in views] == [passed_untimed]
    _, every = svc.reevaluation_targets("ln", all_=True)
    assert {v.id for v in every} == {passed_untimed, overridden, failed}
    _, (one,) = svc.reevaluation_targets(overridden)       # by id: always, so the check can run at last
    assert one.id == overridden
