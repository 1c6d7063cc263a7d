"""Environment variables: the registry of every KBENCH_* variable kbench reads, and its typed readers.

This is the one module that reads KBENCH_* variables from os.environ (tests/project/test_config_env.py checks it);
everything else imports its readers from here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from engine.errors import ConfigError

# Every KBENCH_* variable kbench reads is registered here with what it does, and read only through the
# accessors below: a misspelt name is a KeyError, a value that does not parse a ConfigError naming the
# variable. README.md ("Environment variables") lists the same set; tests/project/test_config_env.py keeps the
# registry, the README and the readers together. Unset or empty means the default.

Env = Mapping[str, str] | None       # None: os.environ (a mapping lets tests and children pass their own)


@dataclass(frozen=True)
class EnvVar:
    name: str
    default: str                     # as the environment would hold it; "" for none
    doc: str
    test_only: bool = False          # a hook for kbench's own tests and benchmarks, not a setting


ENV_VARS: dict[str, EnvVar] = {v.name: v for v in (
    EnvVar("KBENCH_WORKSPACE", "", "the workspace repository when `--workspace` is not given (else ./workspace)"),
    EnvVar("KBENCH_TASKS", "", "folders of your own tasks, separated by `:` like PATH; listed after the built-in ones"),
    EnvVar("KBENCH_CACHE", "", "builds, object files, evaluation records, baselines, roofline peaks and the Models "
                               "API catalogue (else $XDG_CACHE_HOME/kbench, else ~/.cache/kbench)"),
    EnvVar("KBENCH_CLAIM_WAIT_S", "3", "seconds a session held by another writer is retried before refusing"),
    EnvVar("KBENCH_GIT_LOCK_WAIT_MS", "3000", "milliseconds a git `*.lock` file of another process is waited for "
                                              "before a workspace write gives up"),
    EnvVar("KBENCH_JAIL_LIMITS", "", "limits for every jailed step (compilers, the KernelBench import, the runner, "
                                     "the profiler): `memory=8G,processes=256,file=1G,scratch=4G,output=4M,"
                                     "open_files=4096`, any subset (INTEGRITY.md, \"Limits\")"),
    EnvVar("KBENCH_KEEP_JUDGE_S", "", "seconds `kbench eval` keeps a judge up for the next `kbench eval` on the "
                                      "same GPU; 0: none (else `[eval] keep_judge_s`, 300)"),
    EnvVar("KBENCH_WORKSPACE_GC_EVERY", "200", "run `git gc --auto` in the workspace every this many commits; 0: never"),
    EnvVar("KBENCH_SECRETS_FD", "", "internal: the pipe through which kbench hands the API keys to itself when it "
                                    "re-executes without them in its environment (engine.secrets)"),
    EnvVar("KBENCH_CRASHPOINT", "", "`<point>[:<n>]` or `any:<n>`: the process kills itself at that workspace write "
                                    "point (crash-safety tests)", test_only=True),
    EnvVar("KBENCH_CRASHED_DURING_REFS", "", "set by the `during-refs` crash point for the git child it starts, so a "
                                             "test's git hook can slow that child down", test_only=True),
    EnvVar("KBENCH_FAKE_EVAL_DELAY", "0", "`python -m tests.doubles.kbench`: seconds each fake evaluation takes",
           test_only=True),
    EnvVar("KBENCH_FAKE_BUILD_S", "", "seconds the fake compile stage sleeps (default: its caller's)", test_only=True),
    EnvVar("KBENCH_FAKE_GPU_S", "", "seconds the fake GPU stage sleeps (default: its caller's)", test_only=True),
    EnvVar("KBENCH_FAKE_NO_GPU", "", "set: the fake evaluator reports that no GPU is visible", test_only=True),
    EnvVar("KBENCH_FAKE_EVAL_HOLD_AFTER", "0", "the fake evaluator holds every evaluation after the first N until "
                                               "it is closed; 0: never", test_only=True),
    EnvVar("KBENCH_TEST_EXHAUSTIVE", "", "set to 1: run the test that kills an evolution at every workspace write "
                                         "point in turn (10-15 minutes; CI runs every 13th point)", test_only=True),
    EnvVar("KBENCH_TEST_SINGLE_CU", "", "set: run the test that compiles a single-file candidate with nvcc (minutes "
                                        "on a small machine)", test_only=True),
    EnvVar("KBENCH_INTEGRITY_TIMEOUT", "240", "seconds each case of tests/integrity/test_gpu_integrity.py may take",
           test_only=True),
    EnvVar("KBENCH_TEST_LOG", "", "a file: each test's outcome (and a failure's report) is appended to it as the "
                                  "test ends, so a GPU run cut by a time limit still says what ran", test_only=True),
)}

SECRETS_FD_ENV = "KBENCH_SECRETS_FD"


def env_raw(name: str, env: Env = None) -> str:
    """The variable's value, else its registered default ("" for none). Unregistered names are a KeyError."""
    var = ENV_VARS[name]
    return (os.environ if env is None else env).get(name) or var.default


def env_flag(name: str, env: Env = None) -> bool:
    """Set to anything non-empty (as the hooks have always read it: "0" is set too)."""
    return bool(env_raw(name, env))


def env_int(name: str, env: Env = None, default: int | None = None) -> int:
    return int(_number(name, int, env, default))


def env_float(name: str, env: Env = None, default: float | None = None) -> float:
    """`default` stands in for the registered one where the caller has its own (the fake stages' sleeps)."""
    return float(_number(name, float, env, default))


def _number(name: str, kind: type[int] | type[float], env: Env, default: float | None) -> float:
    var = ENV_VARS[name]
    raw = (os.environ if env is None else env).get(name) or ""
    if not raw:
        return default if default is not None else kind(var.default or 0)
    try:
        return kind(raw)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ConfigError(f"${name}: expected {what}, got {raw!r} ({var.doc}).") from None


def workspace_dir(env: Env = None) -> Path | None:
    """$KBENCH_WORKSPACE, None when unset (the caller's fallback is ./workspace)."""
    raw = env_raw("KBENCH_WORKSPACE", env)
    return Path(raw).expanduser() if raw else None


def task_dirs(raw: str | None = None, env: Env = None) -> list[Path]:
    """$KBENCH_TASKS split like PATH (`raw` stands in for the variable)."""
    raw = env_raw("KBENCH_TASKS", env) if raw is None else raw
    return [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]


def cache_dir(env: Env = None) -> Path | None:
    """$KBENCH_CACHE as given; None when unset (each reader picks its fallback: see cache_root)."""
    raw = env_raw("KBENCH_CACHE", env)
    return Path(raw) if raw else None


def cache_root(env: Env = None) -> Path:
    """$KBENCH_CACHE, else $XDG_CACHE_HOME/kbench, else ~/.cache/kbench."""
    e = os.environ if env is None else env
    return cache_dir(env) or Path(e.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "kbench"


def take_secrets_fd() -> int | None:
    """The key pipe's descriptor, removed from os.environ so no child inherits it; None when absent."""
    raw = os.environ.pop(SECRETS_FD_ENV, None)
    return int(raw) if raw is not None else None
