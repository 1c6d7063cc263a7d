"""The Ray executor's envelopes (engine/evolve/ray/envelopes.py): what crosses between the driver and the tasks
on the nodes round-trips through its JSON, EvalOptions crossing as itself; a malformed request is refused by the
task with an EnvelopeError naming the envelope and the field, and a malformed reply by the driver, each ending as an
infrastructure failure that says so (not a verdict on the kernel). The Ray half runs on a local CPU-only
instance with a `fake_gpu` resource, as tests/evolve/test_ray_executor.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from engine.candidates import Candidate, load_candidate  # noqa: E402
from tests.doubles.evaluator import fake_build, fake_gpu, fake_result  # noqa: E402
from engine.evolve.outcome import EvalOutcome  # noqa: E402
from engine.evolve.ray.envelopes import (  # noqa: E402
    BuildReply,
    BuildRequest,
    Built,
    EnvelopeError,
    EvalRequest,
    GpuReply,
    ProbeReply,
    ProfileReply,
    Ran,
    Where,
)
from engine.evolve.ray.executor import RayExecutor  # noqa: E402
from engine.evolve.ray.tasks import build_job, gpu_job, profile_job, worker_inputs  # noqa: E402
from engine.harness.build.result import BuildSummary  # noqa: E402
from engine.pipeline.eval_types import EvalOptions  # noqa: E402
from engine.config.sections import TimingParams  # noqa: E402
from engine.tasks.portable import pack_task  # noqa: E402
from engine.verdict import Stage, Status, Verdict  # noqa: E402
from tests.doubles import evaluator as evaluator_doubles, faults  # noqa: E402
from tests.doubles.faults import fake_profile_stage  # noqa: E402

ARCHIVE = b"\x1f\x8b\x08\x00\xff\xfe not UTF-8"          # a gzipped tar's first bytes are not text
RAN = Ran(Where("node-1", "host-a", 4242, "3"), 100.0, 102.5)
OPTIONS = EvalOptions(configs=["bench"], timing_configs=["all"], trials=3, baselines=("eager",), gpu=1,
                      cache_root=Path("/driver/cache"), timing_params=TimingParams(budget_s=0.2), library_policy="pure")


@pytest.fixture(scope="module")
def local_ray():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, resources={"fake_gpu": 1}, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture
def candidate(task) -> Candidate:
    return load_candidate(task.baseline_dir("forward"))


def request(task, candidate: Candidate, **kw) -> EvalRequest:
    return EvalRequest(pack_task(task), candidate, "forward", OPTIONS, "80;90", **kw)


def test_every_envelope_round_trips_through_its_json(task, candidate):
    built = Built(BuildSummary(ok=True, seconds=1.5, cache_hit=True, steps={"nvcc": 1.2}), ARCHIVE, "tc-key")
    envelopes = [
        BuildRequest(candidate, 120.0, "80;90"),
        request(task, candidate, built=built),
        request(task, candidate, device={"gpu": "NVIDIA H100"}),
        BuildReply(built, RAN),
        BuildReply(Built(BuildSummary(ok=False, error="kernel.cu:3: error", log="log")), RAN),
        GpuReply(fake_result(task, candidate), RAN),
        ProfileReply(Verdict(Stage.PROFILE, Status.PASS, "profiled", {"top": ["k"]}), RAN),
        ProbeReply(RAN.where, archs="90", toolchain_key="tc-key"),
    ]
    for env in envelopes:
        assert type(env).from_json(env.to_json()) == env, type(env).__name__


def test_options_cross_as_eval_options_and_the_archive_as_bytes(task, candidate):
    data = request(task, candidate, built=Built(BuildSummary(ok=True), ARCHIVE, "k")).to_json()
    assert data["built"]["archive"] is ARCHIVE                      # not text: Ray carries the bytes as they are
    assert data["options"]["baselines"] == ["eager"] and data["options"]["cache_root"] == "/driver/cache"
    back = EvalRequest.from_json(data).options
    assert back == OPTIONS and back.baselines == ("eager",) and isinstance(back.cache_root, Path)


def test_a_node_evaluates_with_its_own_cache_and_the_gpu_ray_gave_it(task, candidate, tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path / "node-cache"))
    req, opts, node_task = worker_inputs(request(task, candidate).to_json())
    assert opts.cache_root == tmp_path / "node-cache" and opts.gpu is None
    assert opts.timing_configs == ["all"] and opts.trials == 3 and opts.timing_params == TimingParams(budget_s=0.2)
    assert req.candidate == candidate and node_task.name == task.name and req.archs == "80;90"


def test_a_task_refuses_a_malformed_request_naming_the_envelope_and_the_field(task, candidate):
    good = request(task, candidate).to_json()
    bad = {**good, "options": {**good["options"], "trials": "many"}}
    del bad["direction"]
    with pytest.raises(EnvelopeError, match=r"the Ray GPU task's request: not a valid EvalRequest: direction: field "
                                        r"required; options\.trials: input should be a valid integer"):
        gpu_job(bad, fake_gpu)
    with pytest.raises(EnvelopeError, match=r"the Ray GPU task's request: expected a JSON object"):
        profile_job(None, fake_profile_stage)  # type: ignore[arg-type]
    with pytest.raises(EnvelopeError, match=r"the Ray compile task's request: not a valid BuildRequest: "
                                        r"candidate\.format: input should be 'native'"):
        build_job({"candidate": {**candidate.to_json(), "format": "fortran"}}, fake_build)


def test_a_reply_missing_its_outcome_is_refused_by_the_driver():
    with pytest.raises(EnvelopeError, match=r"the Ray GPU task's reply: not a valid GpuReply: outcome\.verdicts"):
        GpuReply.from_json({"outcome": {"stage": "profile", "status": "pass"}, "ran": RAN.to_json()})
    with pytest.raises(EnvelopeError, match=r"the Ray compile task's reply: not a valid BuildReply: ran: field "):
        BuildReply.from_json({"built": {"build": {"ok": True}}})


def _gpu_fn_with_a_bad_status(task, candidate, direction, options) -> EvalOutcome:
    """A GPU stand-in whose outcome the task sends but the driver cannot read: a status no verdict has."""
    return EvalOutcome([Verdict(Stage.TIMING, "great")])  # type: ignore[arg-type]


def _executor(task, **kw) -> RayExecutor:
    # Ray's workers cannot import tests/: this module's stand-in, and the fakes, go along by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.cloudpickle.register_pickle_by_value(evaluator_doubles)
    ray.cloudpickle.register_pickle_by_value(faults)
    return RayExecutor(task, "forward", EvalOptions(), gpu_resources={"num_cpus": 1, "resources": {"fake_gpu": 1}},
                       build_fn=fake_build, poll_s=0.05, retries=2, **kw)


def test_malformed_envelopes_through_ray_end_as_infrastructure_failures_that_say_why(local_ray, task, candidate):
    ex = _executor(task, gpu_fn=_gpu_fn_with_a_bad_status)
    try:
        out = ex.submit(candidate).result(60)
        assert out.infra_error and out.verdicts == [], out
        assert out.infra_error.startswith("gpu task refused a malformed envelope (not retried): EnvelopeError: the Ray "
                                          "GPU task's reply: not a valid GpuReply: outcome.verdicts[0].status: input "
                                          "should be 'pass'"), out.infra_error
        assert out.attempts == 1                 # the same reply again would be as malformed: no retry
        ex.gpu_fn = fake_gpu
        ex._eval_request = lambda job: {"candidate": job.candidate.to_json()}   # a driver from another kbench
        out = ex.submit(candidate).result(60)
        assert "EnvelopeError in the task: the Ray GPU task's request: not a valid EvalRequest" in out.infra_error, out
        assert out.attempts == 1 and ex.stats()["infrastructure_failures"] == 2 and ex.stats()["retries"] == 0
    finally:
        ex.close()
