"""A reference that mutates some of its arguments in place: robust-kbench's batchnorm fixture, whose forward_fn
(F.batch_norm in training mode) updates running_mean and running_var, inputs 3 and 4 of the call. The judge finds
which arguments its reference mutates (judge_configs.mutations), the candidate may change exactly those and must
leave in them what the reference leaves (digest.mutated_inputs); any other argument it changes fails it as before.
Through the helper's test double (tests/doubles/timing_helper.py) on the CPU;
tests/pipeline/test_gpu_reference_mutation.py
runs the same through the real helper and runner."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.harness.runtimes import runtime_for
from engine.pipeline.judge import analysis
from engine.pipeline.protocol import wire
from engine.pipeline.protocol import messages as msg
from engine.pipeline.eval_types import EvalOptions, EvalReport
from engine.pipeline.judge.configs import plan_message, prepare, reference_outputs
from engine.pipeline.protocol.result import JudgeOutcome
from engine.pipeline.judge.timer import collect
from engine.pipeline.verdicts import fill_report
from engine.procs import ChildOutcome
from engine.tasks.loader import load_task
from engine.verdict import Status, Verdict
from tests.doubles.timing_helper import Session
from tests.paths import FIXTURES

BN = FIXTURES / "robust_kbench" / "batchnorm"


@pytest.fixture(scope="module")
def batchnorm():
    return load_task(BN)


def _reference(x, w, b, mean, var, training, momentum, eps):
    return F.batch_norm(x, mean, var, w, b, training, momentum, eps)


def _stats_untouched(x, w, b, mean, var, training, momentum, eps):
    """The right output, the running statistics left as they came (updated on copies)."""
    return F.batch_norm(x, mean.clone(), var.clone(), w, b, training, momentum, eps)


def _wrong_momentum(x, w, b, mean, var, training, momentum, eps):
    return F.batch_norm(x, mean, var, w, b, training, momentum / 2, eps)


def _also_scales_x(x, w, b, mean, var, training, momentum, eps):
    """Correct, then it writes into x, which the reference leaves alone."""
    y = F.batch_norm(x, mean, var, w, b, training, momentum, eps)
    x.mul_(2)
    return y


def _session(task, cfg, fn, fresh=True):
    return Session(runtime_for(task, "forward"), cfg, fn, fresh=fresh)


def _check(task, cfg, fn, fresh=True):
    s = _session(task, cfg, fn, fresh)
    return s.judge_check(s.check_job())


def test_the_judge_finds_the_running_statistics_its_reference_updates(batchnorm, layernorm):
    prep = prepare(runtime_for(batchnorm, "forward"), batchnorm.configs[0], 2, "cpu")
    header, _ = plan_message(prep)
    assert prep.mutated == (3, 4) and header.mutable_inputs == (3, 4)
    assert header.to_wire()["mutable_inputs"] == [3, 4]
    for v in prep.variants:   # what each variant's own call leaves in them: moved from 0 and 1 towards the batch's
        mean, var = v.after
        assert mean.abs().max() > 0.1 and not torch.allclose(var, torch.ones_like(var))
    assert len(reference_outputs(prep)) == 3   # the output, then the two statistics as they come back
    plain = prepare(runtime_for(layernorm, "forward"), layernorm.configs[0], 2, "cpu")
    assert plain.mutated == () and "mutable_inputs" not in plan_message(plain)[0].to_wire()


def test_the_call_plans_arguments_keep_the_values_every_call_starts_from(batchnorm):
    """The plan's running statistics are the model's buffers: a reference call leaves them as they were (0 and 1),
    so what the runner is given is what the judge's expected values were computed from."""
    rt = runtime_for(batchnorm, "forward")
    prep = prepare(rt, batchnorm.configs[0], 2, "cpu")
    for v in prep.variants:
        rt.restore_state(v.state)
        rt.reference(rt.inputs())
        mean, var = v.plan.args[3], v.plan.args[4]
        assert torch.equal(mean, torch.zeros_like(mean)) and torch.equal(var, torch.ones_like(var))


@pytest.mark.parametrize("fresh", [True, False])
def test_its_own_reference_as_the_candidate_passes_every_config(batchnorm, fresh):
    for cfg in batchnorm.configs:
        corr, integ = _check(batchnorm, cfg, _reference, fresh)
        assert corr.ok and integ.ok, (cfg.name, corr, integ)


@pytest.mark.parametrize("fresh", [True, False])
def test_a_candidate_that_leaves_the_running_statistics_alone_fails_naming_the_input(batchnorm, fresh):
    corr, integ = _check(batchnorm, batchnorm.configs[0], _stats_untouched, fresh)
    assert not corr.ok and "input 3 (mutated in place by the reference) differs after the call" in corr.reason, corr
    assert integ.ok, integ   # a wrong kernel, not a hack


def test_a_candidate_that_updates_them_wrongly_fails_naming_the_input(batchnorm):
    corr, _ = _check(batchnorm, batchnorm.configs[1], _wrong_momentum)
    assert not corr.ok and "input 3 (mutated in place by the reference) differs after the call" in corr.reason, corr


def test_changing_an_input_the_reference_leaves_alone_still_fails(batchnorm, layernorm):
    corr, _ = _check(batchnorm, batchnorm.configs[0], _also_scales_x)
    assert not corr.ok and "modified input 0 in place (the reference leaves it unchanged)" in corr.reason, corr

    def ln_scaling_x(x, w, b, eps):
        y = F.layer_norm(x, (x.shape[-1],), w, b, eps)
        x.mul_(2)
        return y
    corr, _ = _check(layernorm, next(c for c in layernorm.configs if c.name == "odd-small"), ln_scaling_x)
    assert not corr.ok and "modified input 0 in place" in corr.reason, corr


def test_a_helper_told_other_mutable_inputs_than_the_judges_is_forgery(batchnorm):
    """The runner's Python (the candidate's process) passes the list to the helper: the signed ITER records say
    what it passed, and a list other than the judge's voids the stream."""
    s = _session(batchnorm, batchnorm.configs[0], _also_scales_x)
    s.mutable = (0, 3, 4)   # x declared mutable too, so that the probe would let it be
    corr, integ = s.judge_check(s.check_job())
    assert not corr.ok and integ.hack == analysis.FORGERY and "[0, 3, 4]" in integ.reason, integ


def test_the_checked_timed_iterations_compare_the_running_statistics_too(batchnorm):
    cfg = batchnorm.configs[0]
    for fn, ok in ((_reference, True), (_stats_untouched, False)):
        s = _session(batchnorm, cfg, fn)
        tol = s.tolerance
        res = analysis.judge_timing(s.time_job(12, checked=[2, 11]), s.refs, s.compose, tol, 0.0, None)
        assert res.integrity.ok == ok, res.integrity
        if not ok:
            assert "input 3 (mutated in place by the reference)" in res.integrity.reason
        # a timing job read against references that do not say, with the judge's list given
        job = s.time_job(12, checked=[])
        plain = [v.ref for v in s.prep.variants]
        assert analysis.judge_timing(job, plain, s.compose, tol, 0.0, None, mutated=(3, 4)).integrity.ok
        assert analysis.judge_timing(job, plain, s.compose, tol, 0.0, None, mutated=()).integrity.hack == \
            analysis.FORGERY


def _record(rtype, seq, body):
    return wire.Record(rtype, seq, 9, body, 0.0, bytearray())


def test_the_records_after_a_checked_calls_outputs_are_the_arguments_it_may_change():
    records = iter([
        _record(wire.JOB_BEGIN, 0, {"mode": "check"}),
        _record(wire.ITER, 1, {"i": 0, "phase": "c", "v": 0, "ms": 1.0, "ms_all": 1.0, "checked": 1, "outputs": 1,
                               "mutable": [3, 4], "seed": "00"}),
        *[_record(wire.OUTPUT, 2 + k, {"i": 0, "k": k}) for k in range(3)],
        _record(wire.JOB_END, 5, {"status": "ok", "n": 1, "checked": []})])
    seen = []
    job = collect(lambda deadline: next(records), 9, 0.0, lambda rec, k: f"record {k}", seen.append)
    call = job.calls[0]
    assert not job.forged and seen == [call]
    assert call.outputs == ["record 0"] and call.inputs_after == ["record 1", "record 2"] and call.mutable == (3, 4)
    extra = iter([*[_record(wire.ITER, 1, {"i": 0, "phase": "c", "v": 0, "ms": 1.0, "ms_all": 1.0, "checked": 1,
                                            "outputs": 1, "mutable": [], "seed": "00"})],
                  *[_record(wire.OUTPUT, 2 + k, {"i": 0, "k": k}) for k in range(2)]])
    assert "more output records" in collect(lambda deadline: next(extra), 9, 0.0, lambda rec, k: k).forged


def test_the_config_message_checks_its_mutable_inputs():
    base = dict(cid="c", kind="fn", entry="forward", args={"tuple": []}, variants=1, per_variant=5)
    assert msg.Config(**base, mutable_inputs=(3, 4)).mutable_inputs == (3, 4)
    for bad in ((5,), (-1,), (4, 3), (3, 3)):
        with pytest.raises(msg.MessageError):
            msg.Config(**base, mutable_inputs=bad)
    assert msg.parse_request({"type": "config", **base}).mutable_inputs == ()


def test_the_verdict_says_which_inputs_the_reference_mutates(batchnorm):
    names = [c.name for c in batchnorm.configs]
    result = {"finished": True, "correctness": {n: {"ok": True, "trials": 2, "max_abs_err": 0.0} for n in names},
              "mutated": {n: [3, 4] for n in names}}
    rep = EvalReport(batchnorm.name, "forward", "abc", "kernelbench", [Verdict("compile", Status.PASS, "built")], [],
                     {}, {})
    outcome = JudgeOutcome.of(ChildOutcome(result, returncode=0, timed_out=False, seconds=1.0, output_tail=""))
    fill_report(rep, batchnorm, EvalOptions(timing=False), outcome)
    v = rep.verdict("correctness")
    assert v.status == Status.PASS and "inputs 3, 4 mutated in place by the reference" in v.reason, v.reason
    assert all(c["mutated_by_reference"] == [3, 4] for c in v.data["configs"].values())
    assert all(r.mutated_by_reference == [3, 4] for r in rep.rows)
