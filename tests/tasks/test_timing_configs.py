"""Which configs are timed when the user names none (engine.tasks.model: `bench` and the configs tagged `timed`,
else every config), `all`, and the built-in tasks' and the robust-kbench importer's `timed` tags."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.errors import ConfigError, TaskError
from engine.profile.runner import representative_config
from engine.tasks.kernelbench import load_kernelbench
from engine.tasks.loader import builtin_task_names, load_task
from engine.tasks.model import (
    ALL_CONFIGS,
    TIMED_TAG,
    TaskConfig,
    check_timing_names,
    default_timing_configs,
    timing_selection,
)
from engine.tasks.robust_kbench import load_robust_kbench
from tests.paths import FIXTURES


def cfg(name: str, *tags: str) -> TaskConfig:
    return TaskConfig(name, {}, {}, tags=tags)


def task_with(*configs: TaskConfig):
    return replace(load_task("gelu_bias"), configs=configs)


def test_bench_and_the_configs_tagged_timed_are_the_default_in_the_tasks_order():
    t = task_with(cfg("odd-small"), cfg("big", "timed"), cfg("bench"), cfg("wide", "odd"), cfg("rkb", "single", "timed"))
    assert default_timing_configs(t) == ["big", "bench", "rkb"]


def test_bench_alone_or_timed_tags_alone_make_a_default():
    assert default_timing_configs(task_with(cfg("odd"), cfg("bench"), cfg("wide"))) == ["bench"]
    assert default_timing_configs(task_with(cfg("odd"), cfg("large", "timed"))) == ["large"]


def test_a_task_with_neither_times_every_config():
    assert default_timing_configs(task_with(cfg("a"), cfg("b", "odd"), cfg("c", "single"))) is None
    assert default_timing_configs(task_with(cfg("only"))) is None
    assert timing_selection(task_with(cfg("a"), cfg("b")), None) is None          # the judge: every config


def test_kernelbench_problems_are_timed_on_every_config():
    t = load_kernelbench(FIXTURES / "kernelbench" / "matmul_relu.py")
    assert len(t.configs) >= 3 and default_timing_configs(t) is None


def test_the_builtin_llama_rmsnorm_times_bench_and_robust_kbenchs_single_setting():
    t = load_task("llama_rmsnorm")
    assert len(t.configs) == 9
    assert default_timing_configs(t) == ["bench", "rkb-single-1"]
    assert timing_selection(t, None) == ["bench", "rkb-single-1"]


def test_every_builtin_single_config_is_tagged_timed_and_every_builtin_task_has_a_default():
    for name in builtin_task_names():
        t = load_task(name)
        singles = [c.name for c in t.configs if "single" in c.tags]
        assert all(TIMED_TAG in c.tags for c in t.configs if "single" in c.tags), name
        assert default_timing_configs(t) == [c.name for c in t.configs if c.name == "bench" or c.name in singles], name
        assert "bench" in default_timing_configs(t), name


def test_the_robust_kbench_importer_tags_the_single_settings_timed():
    t = load_robust_kbench(FIXTURES / "robust_kbench" / "linear")
    single = [c.name for c in t.configs if "single" in c.tags]
    assert single and default_timing_configs(t) == single
    assert all(TIMED_TAG not in c.tags for c in t.configs if "single" not in c.tags)


def test_all_times_every_config_and_names_are_kept_as_given():
    t = load_task("llama_rmsnorm")
    assert timing_selection(t, [ALL_CONFIGS]) is None
    assert timing_selection(t, ["all", "all"]) is None
    assert timing_selection(t, ["odd-small", "bench"]) == ["odd-small", "bench"]
    assert timing_selection(t, []) == ["bench", "rkb-single-1"]                 # empty is no choice


def test_all_mixed_with_names_is_an_error():
    with pytest.raises(ConfigError, match='"all" .*cannot be combined with config names \\(bench\\)'):
        check_timing_names(["all", "bench"], "--time-config")
    with pytest.raises(ConfigError, match="cannot be combined"):
        timing_selection(load_task("llama_rmsnorm"), ["bench", "all"])
    check_timing_names(["all"])
    check_timing_names(["bench", "odd-small"])
    check_timing_names(None)


def test_a_checked_subset_times_its_default_configs_else_all_of_it():
    t = load_task("llama_rmsnorm")
    assert timing_selection(t, None, ["odd-small", "rkb-single-1", "rkb-multi-1"]) == ["rkb-single-1"]
    assert timing_selection(t, None, ["odd-small", "wide-rows"]) is None            # --config odd-small: timed
    assert timing_selection(t, ["odd-small"], ["odd-small", "bench"]) == ["odd-small"]


def test_a_native_config_may_not_be_named_all(layernorm_task):
    toml = layernorm_task.root / "task.toml"
    toml.write_text(toml.read_text().replace('name = "odd-small"', 'name = "all"'))
    with pytest.raises(TaskError, match="named 'all'"):
        load_task(layernorm_task.root)


def test_the_profile_stage_picks_bench_or_a_config_timed_by_default():
    assert representative_config(load_task("llama_rmsnorm")) == "bench"      # not the last, rkb-multi-3
    assert representative_config(task_with(cfg("a"), cfg("b", "timed"), cfg("c"))) == "b"
    assert representative_config(task_with(cfg("a"), cfg("b"))) == "b"
    assert representative_config(load_task("llama_rmsnorm"), "odd-small") == "odd-small"
