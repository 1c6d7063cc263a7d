"""A session's evaluations time what `kbench eval` times: the options the evolve factory builds from `[eval]`
leave the choice to the task (`bench` and the configs tagged `timed`: engine.tasks.model), so the judge requests
the executors make carry that default, and the fitness (geomean speedup) is over those configs. The build and the
judge are stand-ins (tests/pipeline/timing_fakes.py)."""

from __future__ import annotations

import pytest

from engine.candidates import load_candidate
from engine.config.load import load_config
from engine.config.sections import Config, EvalConfig
from engine.errors import ConfigError
from engine.pipeline.eval_types import options_from_config as eval_options
from tests.doubles.evaluator import FakeEvaluator, fake_build, fake_gpu
from engine.evolve.local_executor import LocalPipelineExecutor
from engine.evolve.ray.envelopes import EvalRequest
from engine.evolve.ray.tasks import worker_inputs
from engine.tasks.loader import load_task
from engine.tasks.model import default_timing_configs
from engine.tasks.portable import pack_task

DEFAULT = ["bench", "rkb-single-1"]


@pytest.fixture
def task():
    return load_task("llama_rmsnorm")


@pytest.fixture
def baseline(task):
    return load_candidate(task.baseline_dir("forward"))


def run_local(task, candidate, config: Config):
    """One evaluation through the local executor the factory configures (in this process, no GPU)."""
    ex = LocalPipelineExecutor(task, "forward", eval_options(config), gpus=[None], build_fn=fake_build,
                               processes=False)
    try:
        return ex.submit(candidate).result(timeout=120)
    finally:
        ex.close()


def test_the_factorys_options_leave_the_choice_to_the_task_unless_eval_names_configs():
    assert eval_options(Config()).timing_configs is None
    assert eval_options(Config(eval=EvalConfig(timing_configs=["all"]))).timing_configs == ["all"]
    assert eval_options(Config(eval=EvalConfig(timing_configs=["bench"]))).timing_configs == ["bench"]


def test_a_session_evaluation_asks_the_judge_for_the_default_and_its_fitness_is_over_those_configs(
        task, baseline, judged):
    out = run_local(task, baseline, Config())
    assert [r["timing_configs"] for r in judged] == [DEFAULT]
    assert judged[0]["configs"] is None                                   # correctness: every config
    assert [c.config for c in out.configs] == DEFAULT and out.speedup_eager == pytest.approx(2.0)
    assert out.measurement().configs == tuple(out.configs)


def test_eval_timing_configs_all_times_every_config_in_a_session(task, baseline, judged):
    out = run_local(task, baseline, Config(eval=EvalConfig(timing_configs=["all"])))
    assert judged[-1]["timing_configs"] is None
    assert [c.config for c in out.configs] == [c.name for c in task.configs]


def test_a_ray_worker_rebuilds_the_same_choice_from_what_the_driver_ships(task, baseline, tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path / "cache"))

    def shipped(config: Config):      # the GPU task's request, as RayExecutor sends it
        return EvalRequest(pack_task(task), baseline, "forward", eval_options(config)).to_json()
    _, opts, worker_task = worker_inputs(shipped(Config()))
    assert opts.timing_configs is None and default_timing_configs(worker_task) == DEFAULT
    _, opts, _ = worker_inputs(shipped(Config(eval=EvalConfig(timing_configs=["all"]))))
    assert opts.timing_configs == ["all"]


def test_the_fake_evaluator_times_what_the_real_one_would(task, baseline):
    assert [c.config for c in fake_gpu(task, baseline, "forward", eval_options(Config())).configs] == DEFAULT
    everything = fake_gpu(task, baseline, "forward", eval_options(Config(eval=EvalConfig(timing_configs=["all"]))))
    assert len(everything.configs) == len(task.configs)
    ev = FakeEvaluator(task)
    try:
        assert [c.config for c in ev.submit(baseline).result(timeout=30).configs] == DEFAULT
    finally:
        ev.close()


def test_eval_timing_configs_may_not_mix_all_with_names(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    ws = tmp_path / "ws"
    (ws / ".kbench").mkdir(parents=True)
    (ws / ".kbench" / "config.toml").write_text('[eval]\ntiming_configs = ["all", "bench"]\n')
    with pytest.raises(ConfigError, match=r'\[eval\] timing_configs: "all" .*cannot be combined .*\(bench\)'):
        load_config(ws)
    (ws / ".kbench" / "config.toml").write_text('[eval]\ntiming_configs = ["all"]\n')
    assert load_config(ws).eval.timing_configs == ["all"]
    assert load_config(ws, {"eval.timing_configs": ["bench"]}).eval.timing_configs == ["bench"]
