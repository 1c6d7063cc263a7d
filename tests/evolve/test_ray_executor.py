"""The Ray executor against a local Ray instance started here: CPU only, the compile and GPU halves replaced
by the fake stages of tests/doubles/evaluator.py (the GPU half with tests/doubles/faults.py's fault hooks; a
custom `fake_gpu` resource stands in for GPUs). Workers are killed for real, with SIGKILL from outside, and a node is removed from a multi-node
local cluster mid-evaluation."""

from __future__ import annotations

import builtins
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from engine.candidates import Candidate, load_candidate  # noqa: E402
from engine.cli import main  # noqa: E402
from engine.config.load import load_config  # noqa: E402
from engine.errors import KbenchError  # noqa: E402
from engine.evolve.factory import make_evaluator  # noqa: E402
from tests.doubles.evaluator import FakeEvaluator, fake_build, fake_gpu  # noqa: E402
from engine.evolve.local_executor import LocalPipelineExecutor  # noqa: E402
from engine.evolve.loop import Budgets, EvolutionSession  # noqa: E402
from engine.evolve.operators import OperatorPolicy  # noqa: E402
from engine.evolve.outcome import EvalOutcome  # noqa: E402
from engine.evolve.ray.executor import RayExecutor  # noqa: E402
from engine.evolve.resume import INFRA_FAILURE, load_state  # noqa: E402
from engine.pipeline.eval_types import EvalOptions  # noqa: E402
from engine.proposers.replay import ReplayProposer  # noqa: E402
from engine.workspace import Workspace  # noqa: E402
from tests.doubles import evaluator as evaluator_doubles, faults  # noqa: E402
from tests.doubles.faults import fake_profile_stage, fault_gpu  # noqa: E402

FAKE_GPU = {"num_cpus": 1, "resources": {"fake_gpu": 1}}


def _start_local():
    # address="local": always a fresh instance of our own, never a cluster some other process left running
    ray.init(address="local", num_cpus=4, resources={"fake_gpu": 2}, include_dashboard=False, log_to_driver=False,
             configure_logging=False)


@pytest.fixture(scope="module")
def local_ray():
    if ray.is_initialized():
        ray.shutdown()
    _start_local()
    yield
    ray.shutdown()


def variant(task, marker: str) -> Candidate:
    base = load_candidate(task.baseline_dir("forward"))
    files = dict(base.files)
    files["kernel.cu"] += f"\n// {marker}\n"
    return Candidate(base.format, files, f"v-{abs(hash(marker)) % 10**6}")


def ray_executor(task, **kw):
    """The GPU half is fault_gpu (FAKE_PIDFILE= / FAKE_GPU_SLEEP= markers: tests/doubles/faults.py)."""
    for doubles in (evaluator_doubles, faults):      # Ray's workers cannot import tests/: ship them whole
        ray.cloudpickle.register_pickle_by_value(doubles)
    return RayExecutor(task, "forward", EvalOptions(cache_root=Path("/nonexistent-not-used")),
                       gpu_resources=FAKE_GPU, build_fn=fake_build, gpu_fn=fault_gpu, poll_s=0.05, **kw)


def summary(out: EvalOutcome):
    return [(v.stage, v.status.value) for v in out.verdicts], out.speedup_eager, out.infra_error


def killer(pidfile: Path, kills: int, stop: threading.Event) -> threading.Thread:
    """Kill (SIGKILL) the first `kills` processes that write their pid to `pidfile`."""
    def run():
        killed: set[int] = set()
        while not stop.is_set() and len(killed) < kills:
            if pidfile.exists():
                for line in pidfile.read_text().splitlines():
                    pid = int(line.split()[0])
                    if pid not in killed and len(killed) < kills:
                        time.sleep(0.2)           # well inside its sleep: mid-evaluation
                        os.kill(pid, signal.SIGKILL)
                        killed.add(pid)
            time.sleep(0.05)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_same_outcomes_as_the_local_pipeline(local_ray, task):
    cands = [variant(task, "FAKE_SPEEDUP=1.7 ok"), variant(task, "FAIL_COMPILE"), variant(task, "FAIL_CORRECT")]
    local = LocalPipelineExecutor(task, "forward", EvalOptions(), gpus=[None], build_fn=fake_build, gpu_fn=fake_gpu,
                                  processes=False)
    want = [summary(local.submit(c).result(30)) for c in cands]
    local.close()
    ex = ray_executor(task)
    stages: list[str] = []
    futs = [ex.submit(c, on_stage=lambda v: stages.append(v.stage)) for c in cands]
    got = [summary(f.result(60)) for f in futs]
    stats = ex.stats()
    ex.close()
    assert got == want
    assert got[0][1] == pytest.approx(1.7) and got[1][0] == [("compile", "fail")]
    assert stats["completed"] == 3 and stats["executor"] == "ray" and stats["gpus"] == 2
    assert sum(len(iv) for iv in stats["intervals"].values()) == 2      # two candidates reached a "GPU"
    assert stages.count("compile") == 3 and "timing" in stages          # progress flows back per stage


def test_profile_runs_alone_as_a_gpu_task(local_ray, task, tmp_path):
    """`profile()` (a session's new best, [eval] profile = "best"): the profile stage as its own GPU task, its
    verdict back in the future; a task lost on every attempt is a skipped verdict, not an infrastructure failure."""
    ex = ray_executor(task, profile_fn=fake_profile_stage, retries=0)
    try:
        cand = variant(task, "FAKE_SPEEDUP=1.3 profiled")
        out = ex.submit(cand).result(60)
        v = ex.profile(cand, device=out.device).result(60)
        assert v.stage == "profile" and v.status.value == "pass" and v.data["device"] == out.device
        pidfile = tmp_path / "pids"
        lost = variant(task, f"FAKE_PIDFILE={pidfile}")
        stop = threading.Event()
        k = killer(pidfile, kills=1, stop=stop)
        ex.profile_fn = _pid_then_sleep       # writes its pid for the killer, then holds the "GPU"
        v = ex.profile(lost).result(60)
        stop.set()
        k.join(5)
        assert v.status.value == "skipped" and "lost on all 1 attempt" in v.reason, v.reason
        stats = ex.stats()
        assert stats["profiled"] == 2 and stats["completed"] == 1 and stats["infrastructure_failures"] == 0
    finally:
        ex.close()


def _pid_then_sleep(task, candidate, direction, options, device=None):
    path = re.search(r"FAKE_PIDFILE=(\S+)", "".join(candidate.files.values())).group(1)
    with open(path, "a") as f:
        f.write(f"{os.getpid()} -\n")
    time.sleep(30)


def evaluate_while_killing(task, cand, pidfile: Path, kills: int, retries: int):
    """Submit `cand` to a Ray executor while the first `kills` workers that start on it are SIGKILLed."""
    stop = threading.Event()
    k = killer(pidfile, kills=kills, stop=stop)
    ex = ray_executor(task, retries=retries)
    try:
        out = ex.submit(cand).result(120)
    finally:
        stop.set()
        k.join(5)
        ex.close()
    return out, ex.stats()


def test_a_killed_worker_is_retried_and_the_evaluation_completes(local_ray, task, tmp_path):
    pidfile = tmp_path / "pids"
    cand = variant(task, f"FAKE_SPEEDUP=1.3 FAKE_PIDFILE={pidfile} FAKE_GPU_SLEEP=30")
    out, stats = evaluate_while_killing(task, cand, pidfile, kills=1, retries=2)
    pids = [int(line.split()[0]) for line in pidfile.read_text().splitlines()]
    assert len(pids) == 2 and pids[0] != pids[1]                 # a second, fresh worker did it
    assert not out.infra_error and out.speedup_eager == pytest.approx(1.3)
    assert out.attempts == 2 and stats["retries"] == 1
    lost = out.data["ray"]["failed_attempts"]
    assert len(lost) == 1 and lost[0]["phase"] == "gpu" and "Crashed" in lost[0]["error"], lost


def test_a_worker_lost_on_every_attempt_is_an_infrastructure_failure(local_ray, task, tmp_path):
    pidfile = tmp_path / "pids"
    cand = variant(task, f"FAKE_PIDFILE={pidfile} FAKE_GPU_SLEEP=30 FAKE_SLEEP_ATTEMPTS=9")
    out, stats = evaluate_while_killing(task, cand, pidfile, kills=2, retries=1)
    assert out.infra_error and "2 attempt(s)" in out.infra_error, out.infra_error
    assert out.verdicts == [] and out.measurement() is None and out.attempts == 2
    assert stats["infrastructure_failures"] == 1


def test_session_records_infrastructure_failure_goes_on_and_resume_evaluates_it(local_ray, task, tmp_path):
    pidfile = tmp_path / "pids"
    rec = tmp_path / "recorded"
    rec.mkdir()
    for i, marker in enumerate(["FAKE_SPEEDUP=1.5 one", f"FAKE_PIDFILE={pidfile} FAKE_GPU_SLEEP=30 "
                                "FAKE_SLEEP_ATTEMPTS=9 doomed", "FAKE_SPEEDUP=1.9 three"]):
        variant(task, marker).write_to(rec / f"c{i}")
    stop = threading.Event()
    k = killer(pidfile, kills=2, stop=stop)
    ws = Workspace.create(tmp_path / "ws")
    ex = ray_executor(task, retries=1)
    events = []
    s = EvolutionSession(ws, "ray", task, ReplayProposer.from_directory(rec), ex,
                         budgets=Budgets(generations=1, population=3), policy=OperatorPolicy({"mutate": 1.0}))
    s.subscribe(events.append)
    result = s.run()
    stop.set()
    k.join(5)
    ex.close()
    assert result.completed, result
    views = {v.record.id: v for v in ws.candidates("ray")}
    doomed = next(cid for cid, v in views.items() if "doomed" in ws.files(cid).files["kernel.cu"])
    st = views[doomed].status
    assert [e.event for e in st.events if e.event in ("evaluated", INFRA_FAILURE)] == [INFRA_FAILURE]
    assert st.events[-1].data["attempts"] == 2 and st.measurement is None
    others = [v for cid, v in views.items() if cid != doomed]
    assert all(v.status.measurement is not None for v in others) and len(others) == 3   # baseline + two
    ev = next(e for e in events if e.kind == "CandidateEvaluated" and e.candidate == doomed)
    assert ev.infrastructure and "infrastructure failure" in ev.line()
    assert ws.best("ray").speedup >= 1.9
    # the failure was the machinery's: a resumed session evaluates it (here with a healthy fake evaluator)
    assert load_state(ws, "ray").requeue == [doomed]
    fake = FakeEvaluator(task)
    again = EvolutionSession(ws, "ray", task, ReplayProposer.from_directory(rec), fake,
                             budgets=Budgets(generations=1, population=3), policy=OperatorPolicy({"mutate": 1.0}))
    again.run()
    fake.close()
    assert ws.status(doomed).measurement is not None
    ws.close()


def test_the_loop_stops_when_the_executor_keeps_failing(local_ray, task, tmp_path):
    pidfile = tmp_path / "pids"
    rec = tmp_path / "recorded"
    rec.mkdir()
    for i in range(4):
        variant(task, f"FAKE_PIDFILE={pidfile} FAKE_GPU_SLEEP=30 FAKE_SLEEP_ATTEMPTS=99 n{i}").write_to(rec / f"c{i}")
    stop = threading.Event()
    k = killer(pidfile, kills=99, stop=stop)
    ws = Workspace.create(tmp_path / "ws")
    ex = ray_executor(task, retries=0)
    s = EvolutionSession(ws, "broken", task, ReplayProposer.from_directory(rec), ex, use_baseline=False,
                         budgets=Budgets(generations=3, population=2, infra_failures_in_a_row=2))
    result = s.run()
    stop.set()
    k.join(5)
    ex.close(wait=False)
    assert not result.completed and "lost 2 evaluations in a row" in result.reason, result.reason
    ws.close()


@pytest.mark.timeout(240)
def test_a_lost_node_is_retried_on_another_node(task, tmp_path, local_ray):
    ray.shutdown()                    # this test brings its own three-node cluster
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    nodes = [cluster.add_node(num_cpus=1, resources={"fake_gpu": 1}) for _ in range(2)]
    try:
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        cluster.wait_for_nodes()
        pidfile = tmp_path / "pids"
        cand = variant(task, f"FAKE_SPEEDUP=1.4 FAKE_PIDFILE={pidfile} FAKE_GPU_SLEEP=60")
        ex = ray_executor(task, retries=2)
        fut = ex.submit(cand)
        t0 = time.monotonic()
        while not pidfile.exists() and time.monotonic() - t0 < 60:
            time.sleep(0.05)
        first_node = pidfile.read_text().split()[1]
        victim = next(n for n in nodes if n.node_id == first_node)
        cluster.remove_node(victim)                  # the node dies mid-evaluation
        out = fut.result(120)
        ex.close()
        assert not out.infra_error and out.speedup_eager == pytest.approx(1.4)
        lost = out.data["ray"]["failed_attempts"]
        assert len(lost) == 1 and ("NodeDied" in lost[0]["error"] or "Crashed" in lost[0]["error"]), lost
        assert out.data["ray"]["gpu"]["node"] != first_node          # retried elsewhere
    finally:
        ray.shutdown()
        cluster.shutdown()
        _start_local()      # the module fixture's instance, for any test after this one


def test_executor_factory_and_clear_errors(local_ray, task, monkeypatch):
    cfg = load_config(None, {"executor.kind": "ray"}, env={}, user_file="/nonexistent")
    with pytest.raises(KbenchError, match="has no GPU"):    # this cluster's GPUs are fake resources
        make_evaluator(task, "forward", cfg)
    assert ray.is_initialized()                             # an instance it did not start is left alone
    with pytest.raises(KbenchError, match="--sequential"):
        make_evaluator(task, "forward", cfg, sequential=True)
    real_import = builtins.__import__

    def no_ray(name, *a, **kw):
        if name == "engine.evolve.ray.executor":
            raise ImportError("the Ray executor needs Ray: pip install 'kbench[ray]' (or pip install ray)")
        return real_import(name, *a, **kw)
    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(KbenchError, match="pip install 'kbench\\[ray\\]'"):
        make_evaluator(task, "forward", cfg)


def test_unreachable_cluster_is_a_one_paragraph_error(task):
    if ray.is_initialized():
        ray.shutdown()
    with pytest.raises(KbenchError, match="cannot connect to the Ray cluster \\(127.0.0.1:1\\)"):
        RayExecutor(task, "forward", EvalOptions(), address="127.0.0.1:1", gpu_resources=FAKE_GPU,
                    build_fn=fake_build, gpu_fn=fake_gpu, ship_code=False)


def test_cli_evolve_with_ray_on_a_cluster_without_gpus(tmp_path, capsys):
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        rc = main(["--workspace", str(tmp_path / "ws"), "evolve", "gelu_bias", "--proposer", "tuner",
                   "--executor", "ray", "--generations", "1", "--population", "1"])
    finally:
        ray.shutdown()
    err = capsys.readouterr().err
    assert rc == 2 and "the Ray cluster has no GPU" in err, err
