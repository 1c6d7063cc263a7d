"""engine.config.load: layered TOML config (defaults <- user <- workspace <- env <- flags), typed and checked."""

from __future__ import annotations

import math

import pytest

from engine.config.load import load_config, user_config_path

from engine.config.prices import DEFAULT_PRICES, Price

from engine.errors import ConfigError
from engine.llm.accounting import CostLedger
from tests.paths import REPO


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_defaults_without_files(tmp_path):
    cfg = load_config(env={"HOME": str(tmp_path)})
    assert cfg.llm.provider == "anthropic" and cfg.llm.model == "claude-opus-5-5"
    assert cfg.llm.thinking == "auto" and 1024 <= cfg.llm.thinking_budget < cfg.llm.max_tokens
    assert cfg.llm.max_tokens >= 32000 and cfg.llm.outage_minutes == 10.0 and cfg.llm.effort == "high"
    assert cfg.budget.usd == 10.0 and cfg.verify.min_confidence == 0.7 and cfg.verify.effort == "low"
    assert cfg.sources == ()


def test_user_file_honours_xdg_config_home(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}
    assert user_config_path(env) == tmp_path / "xdg" / "kbench" / "config.toml"
    assert user_config_path({"HOME": str(tmp_path / "home")}) == tmp_path / "home" / ".config" / "kbench" / "config.toml"
    write(tmp_path / "xdg" / "kbench" / "config.toml", '[llm]\nmodel = "claude-haiku-4-5"\n')
    assert load_config(env=env).llm.model == "claude-haiku-4-5"


def test_layers_workspace_env_flags(tmp_path):
    user = write(tmp_path / "user.toml", """
[llm]
model = "claude-opus-4-5"
max_tokens = 20000
temperature = 0.5

[budget]
usd = 3

[keys]
quit = "q"

[harness]
timeout_s = 90
""")
    ws = tmp_path / "ws"
    write(ws / ".kbench" / "config.toml", '[llm]\nmax_tokens = 24000\n[budget]\nusd = 5.5\n[keys]\nhelp = "?"\n')
    cfg = load_config(ws, {"llm.thinking_budget": 4096, "llm": {"timeout_s": 30}, "budget.usd": None},
                      env={"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}, user_file=user)
    assert cfg.llm.model == "claude-opus-4-5"          # user
    assert cfg.llm.max_tokens == 24000                 # workspace over user
    assert cfg.llm.temperature == 0.5
    assert cfg.llm.thinking_budget == 4096 and cfg.llm.timeout_s == 30.0  # flags, dotted and nested
    assert cfg.budget.usd == 5.5                       # None flags are ignored (argparse defaults)
    assert cfg.llm.base_url == "http://127.0.0.1:9"    # environment
    assert cfg.keys == {"quit": "q", "help": "?"}
    assert cfg.extra == {"harness": {"timeout_s": 90}}  # other sections kept raw for their owners
    assert cfg.sources == (str(user), str(ws / ".kbench" / "config.toml"), "env:ANTHROPIC_BASE_URL", "flags")


def test_flag_beats_env_base_url(tmp_path):
    cfg = load_config(flags={"llm.base_url": "http://flag"}, env={"ANTHROPIC_BASE_URL": "http://env"},
                      user_file=tmp_path / "none.toml")
    assert cfg.llm.base_url == "http://flag"


@pytest.mark.parametrize("text, words", [
    ('[llm]\nmodle = "x"\n', ["unknown key", "modle", "[llm]"]),
    ('[llm]\nmax_tokens = "lots"\n', ["max_tokens", "expected int"]),
    ('[llm]\nthinking = "sometimes"\n', ["thinking"]),
    ('[llm]\nthinking_budget = 100\n', ["thinking_budget", "1024"]),
    ('[llm]\nprovider = "openai"\n', ["provider", "openai-compatible"]),
    ('[llm]\nprovider = "openai-compatible"\n', ["base_url is required"]),
    ('[llm]\neffort = "extreme"\n', ["[llm] effort"]),
    ('[verify]\neffort = "none"\n', ["[verify] effort"]),
    ('[llm]\nconcurrency = 0\n', ["concurrency"]),
    ('[llm]\ncontext_tokens = 512\n', ["[llm] context_tokens", "at least 1024", "512"]),
    ('[llm]\ncontext_tokens = "32k"\n', ["context_tokens", "expected int"]),
    ('[llm]\nstream = "yes"\n', ["stream", "expected bool"]),
    ('[llm]\noutage_minutes = -1\n', ["outage_minutes"]),
    ('[budget]\nusd = -1\n', ["usd"]),
    ('[verify]\nmin_confidence = 2\n', ["min_confidence"]),
    ('[llm.prices."my-model"]\noutput = 3\n', ["input", "required"]),
    ('[keys]\nquit = 1\n', ["[keys]"]),
    ('llm = 3\n', ["[llm] must be a table"]),
    ('[llm\n', ["TOML"]),
    ('[eval]\ntrials = 0\n', ["[eval]", "trials"]),
    ('[eval]\ntiming_configs = "bench"\n', ["timing_configs", "expected list[str], got 'bench'"]),
    ('[eval]\ntiming_configs = [1]\n', ["timing_configs", "expected list[str], got [1] (item 0: input should be a valid string)"]),
    ('[executor]\nkind = "slurm"\n', ["[executor] kind", "local or ray"]),
    ('[executor]\ngpus = "0,x"\n', ["[executor] gpus"]),
    ('[executor]\nretries = -1\n', ["retries"]),
    ('[executor]\nray_adress = "auto"\n', ["unknown key", "ray_adress"]),
])
def test_bad_files_name_the_file_and_key(tmp_path, text, words):
    path = write(tmp_path / "c.toml", text)
    with pytest.raises(ConfigError) as err:
        load_config(user_file=path, env={})
    msg = str(err.value)
    assert str(path) in msg
    for w in words:
        assert w in msg


def test_every_problem_of_a_file_in_one_error(tmp_path):
    path = write(tmp_path / "c.toml", '[llm]\nmodle = "x"\nmax_tokens = "lots"\nmodels_api = 1\n'
                                       '[executor]\nbuild_cpus = true\n')
    with pytest.raises(ConfigError) as err:
        load_config(user_file=path, env={})
    msg = str(err.value)
    assert msg.startswith(f"{path}: 4 problems: ")
    assert "[llm] max_tokens: expected int, got 'lots'" in msg and "[llm] models_api: expected bool, got 1" in msg
    assert "[llm] unknown key(s) modle (did you mean model?); known: " in msg
    assert "[executor] build_cpus: expected float, got True" in msg


@pytest.mark.parametrize("text", ['[llm]\nconcurrency = "2"\n', "[llm]\nmax_tokens = 3.0e4\n", "[llm]\nmax_tokens = true\n",
                                  "[budget]\nusd = false\n", '[verify]\nenabled = "yes"\n', '[llm]\nmodel = 5\n'])
def test_values_are_not_coerced_across_types(tmp_path, text):
    with pytest.raises(ConfigError, match="expected"):
        load_config(user_file=write(tmp_path / "c.toml", text), env={})


def test_importing_the_config_does_not_import_pydantic():
    import subprocess
    import sys
    code = "import sys, engine.config; print('pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO).stdout
    assert out.strip() == "False"      # only load_config pays for it (the CLI imports engine.config at start)


def test_bad_flag_is_reported_as_flags(tmp_path):
    with pytest.raises(ConfigError, match="flags"):
        load_config(flags={"llm.max_retries": "three"}, user_file=tmp_path / "none.toml", env={})


def test_prices_match_exact_ids_and_dated_snapshots_only(tmp_path):
    path = write(tmp_path / "c.toml", '[llm.prices."claude-sonnet-4-5"]\ninput = 2\noutput = 10\n'
                                       '[llm.prices."house-model"]\ninput = 1\n')
    cfg = load_config(user_file=path, env={})
    sonnet = cfg.llm.price_for("claude-sonnet-4-5-20250929")  # a dated snapshot finds its undated id
    assert sonnet == Price(2.0, 10.0, 2.5, pytest.approx(0.2))
    assert cfg.llm.price_for("house-model") == Price(1.0, 5.0, 1.25, pytest.approx(0.1))
    assert cfg.llm.price_for("claude-haiku-4-5-20251001") == DEFAULT_PRICES["claude-haiku-4-5"]
    # a newer Opus is not priced as an older one by prefix: its own row, or (unknown) the dearest tier
    assert cfg.llm.price_for("claude-opus-5-5") == Price(4.0, 20.0, 5.0, 0.20)
    assert cfg.llm.price_for("claude-opus-4-1") == Price(15.0, 75.0, 18.75, 1.50)
    assert cfg.llm.price_for("claude-opus-4-9") == DEFAULT_PRICES["*"]
    assert cfg.llm.price_for("claude-opus-4") != cfg.llm.price_for("claude-opus-4-5")
    assert cfg.llm.price_for("someone-elses-model") == DEFAULT_PRICES["*"]


def test_a_long_prompt_is_priced_at_its_tier_unless_the_user_priced_the_model(tmp_path):
    cfg = load_config(user_file=tmp_path / "none.toml", env={})
    assert cfg.llm.price_for("claude-haiku-5-5", 100_000) == Price(0.10, 0.50, 0.125, 0.01)
    assert cfg.llm.price_for("claude-haiku-5-5", 100_001) == Price(0.50, 2.50, 0.625, 0.05)
    assert cfg.llm.price_for("claude-opus-5-5", 900_000) == Price(4.0, 20.0, 5.0, 0.20)   # one rate for any length
    own = write(tmp_path / "c.toml", '[llm.prices."claude-haiku-5-5"]\ninput = 0.2\n')
    assert load_config(user_file=own, env={}).llm.price_for("claude-haiku-5-5", 500_000).input == 0.2


def test_openai_compatible_models_are_free_unless_priced(tmp_path):
    local = write(tmp_path / "l.toml", '[llm]\nprovider = "openai-compatible"\nbase_url = "http://127.0.0.1:8000/v1"\n'
                                       'model = "qwen3-coder"\n')
    cfg = load_config(user_file=local, env={})
    assert cfg.llm.price_for("qwen3-coder") == Price(0.0, 0.0, 0.0, 0.0)
    assert cfg.llm.key_env() == "OPENAI_API_KEY"
    paid = write(tmp_path / "p.toml", local.read_text() + '[llm.prices."*"]\ninput = 0.5\noutput = 1.5\n')
    assert load_config(user_file=paid, env={}).llm.price_for("qwen3-coder").output == 1.5


def test_infinite_budget_means_no_limit(tmp_path):
    cfg = load_config(user_file=write(tmp_path / "c.toml", "[budget]\nusd = inf\n"), env={})
    assert math.isinf(cfg.budget.usd)
    ledger = CostLedger(cfg.budget.usd)
    assert ledger.budget_usd is None and ledger.remaining_usd is None
    ledger.check()


def test_eval_and_executor_sections_and_their_flags(tmp_path):
    from engine.pipeline.eval_types import options_from_config as eval_options

    path = write(tmp_path / "c.toml", '[eval]\ncompile_baseline = false\ntiming_configs = ["bench"]\n'
                                       '[executor]\nkind = "ray"\nray_address = "auto"\nretries = 3\n')
    cfg = load_config(user_file=path, env={})
    assert cfg.executor.kind == "ray" and cfg.executor.ray_address == "auto" and cfg.executor.retries == 3
    opts = eval_options(cfg)
    assert opts.baselines == ("eager",) and opts.timing_configs == ["bench"]
    assert opts.trials is None and opts.mode == "kbench"   # unset: the mode's count (2; upstream 5), eval_mode.plan
    assert cfg.eval.profile == "best" and not opts.profile    # new bests are profiled on their own, not inline
    cfg = load_config(user_file=path, env={}, flags={"executor.kind": "local", "eval.trials": 3, "eval.profile": False})
    assert cfg.executor.kind == "local" and eval_options(cfg).trials == 3 and cfg.eval.profile == "off"
    assert not eval_options(cfg).profile
    assert eval_options(load_config(user_file=path, env={}, flags={"eval.profile": "all"})).profile
    defaults = load_config(user_file=tmp_path / "none.toml", env={})
    assert defaults.executor.kind == "local" and defaults.eval.compile_baseline and defaults.eval.timeout_s == 600
