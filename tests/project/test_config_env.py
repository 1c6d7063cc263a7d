"""KBENCH_* environment variables: one registry (engine.config.env.ENV_VARS) that the README's table matches, that
every variable mentioned anywhere is in, and that every reader goes through."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from engine.config import env as config_env
from engine.config.env import ENV_VARS
from engine.errors import ConfigError
from tests.paths import REPO

NAME = re.compile(r"(?<![A-Za-z0-9_])KBENCH_[A-Z0-9_]+")
# Still read with os.environ; another change moves them to engine.config's accessors. Take a file off this
# list once it reads through engine.config.env.
PENDING: set[str] = set()
# The one module that reads KBENCH_* variables from the environment: the registry's own accessors.
READER = "engine/config/env.py"


def _sources() -> list[Path]:
    return [p for folder in ("engine", "kbench_tui", "scripts", "tests") for p in sorted((REPO / folder).rglob("*.py"))]


def _readme_table() -> dict[str, str]:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Environment variables"):]
    section = section[:section.index("\n## ", 5)]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `(KBENCH_[A-Z0-9_]+)` \| (.*?) \|", section, re.M)}


def test_the_readme_lists_exactly_the_registered_variables_and_marks_the_test_hooks():
    table = _readme_table()
    assert set(table) == set(ENV_VARS)
    hooks = {name for name, what in table.items() if what.startswith("test hook")}
    assert hooks == {v.name for v in ENV_VARS.values() if v.test_only}


def test_every_variable_mentioned_anywhere_is_registered():
    texts = [*_sources(), REPO / ".ci" / "run", REPO / "README.md", REPO / "INTEGRITY.md",
             *sorted((REPO / "docs").glob("*.md"))]
    unknown = {f"{p.relative_to(REPO)}: {name}" for p in texts for name in NAME.findall(p.read_text())
               if name not in ENV_VARS}
    assert not unknown, "\n".join(sorted(unknown))


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (isinstance(node, ast.Name) and node.id == "environ")


def _reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of each read of a KBENCH_* variable: `.get(X)`, `.pop(X)`, `getenv(X)`, `env[X]` and
    `X in os.environ`, X a literal or a module-level name bound to one. Writes (`env[X] = ...`, dict keys) pass."""
    bound = {t.id: n.value.value for n in getattr(tree, "body", []) if isinstance(n, ast.Assign)
             and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
             for t in n.targets if isinstance(t, ast.Name)}

    def name(node: ast.AST | None) -> str | None:
        value = node.value if isinstance(node, ast.Constant) else bound.get(node.id) if isinstance(node, ast.Name) else None
        return value if isinstance(value, str) and NAME.fullmatch(value) else None

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and (
                (isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop", "getenv"))
                or (isinstance(node.func, ast.Name) and node.func.id == "getenv")):
            key = name(node.args[0])
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = name(node.slice)
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In) and _is_environ(node.comparators[0]):
            key = name(node.left)
        else:
            continue
        if key:
            found.append((node.lineno, key))
    return found


def test_kbench_variables_are_read_only_through_engine_config():
    offenders = []
    for path in _sources():
        rel = str(path.relative_to(REPO))
        if rel == READER or rel in PENDING:
            continue
        offenders += [f"{rel}:{line} reads {key}" for line, key in _reads(ast.parse(path.read_text()))]
    assert not offenders, "read these through engine.config.env:\n" + "\n".join(offenders)


def test_the_reader_is_the_registry_module_and_defines_every_accessor():
    assert _reads(ast.parse((REPO / READER).read_text()))          # the exemption is not for a module that reads none
    for name in ("EnvVar", "env_raw", "env_flag", "env_int", "env_float", "cache_root", "cache_dir", "task_dirs",
                 "workspace_dir", "take_secrets_fd"):
        assert getattr(config_env, name).__module__ == "engine.config.env", name
    assert "KBENCH_SECRETS_FD" == config_env.SECRETS_FD_ENV and config_env.ENV_VARS


def test_the_read_check_sees_direct_and_indirect_reads_but_not_writes():
    tree = ast.parse('ENV = "KBENCH_TASKS"\n'
                     'a = os.environ.get("KBENCH_CACHE")\n'
                     'b = os.environ.pop(ENV, None)\n'
                     'c = "KBENCH_CRASHPOINT" in os.environ\n'
                     'd = env["KBENCH_FAKE_GPU_S"]\n'
                     'os.environ["KBENCH_FAKE_NO_GPU"] = "1"\n'
                     'e = {"KBENCH_FAKE_EVAL_DELAY": "0.3"}\n'
                     'f = "KBENCH_TASKS" in readme_text\n')
    assert _reads(tree) == [(2, "KBENCH_CACHE"), (3, "KBENCH_TASKS"), (4, "KBENCH_CRASHPOINT"),
                            (5, "KBENCH_FAKE_GPU_S")]


def test_typed_readers_use_the_registered_default_for_unset_or_empty():
    assert config_env.env_float("KBENCH_CLAIM_WAIT_S", {}) == 3.0
    assert config_env.env_int("KBENCH_GIT_LOCK_WAIT_MS", {"KBENCH_GIT_LOCK_WAIT_MS": ""}) == 3000
    assert config_env.env_int("KBENCH_WORKSPACE_GC_EVERY", {"KBENCH_WORKSPACE_GC_EVERY": "0"}) == 0
    assert config_env.env_float("KBENCH_FAKE_GPU_S", {}, default=0.25) == 0.25      # the caller's default
    assert config_env.env_float("KBENCH_FAKE_GPU_S", {"KBENCH_FAKE_GPU_S": "2"}, default=0.25) == 2.0
    assert config_env.env_flag("KBENCH_FAKE_NO_GPU", {"KBENCH_FAKE_NO_GPU": "0"})   # set is set, as it always was
    assert not config_env.env_flag("KBENCH_FAKE_NO_GPU", {})


def test_a_bad_value_names_the_variable_and_an_unknown_name_is_refused():
    with pytest.raises(ConfigError, match=r"\$KBENCH_CLAIM_WAIT_S: expected a number, got 'soon'"):
        config_env.env_float("KBENCH_CLAIM_WAIT_S", {"KBENCH_CLAIM_WAIT_S": "soon"})
    with pytest.raises(KeyError):
        config_env.env_raw("KBENCH_" + "CLAIM_WAIT", {})      # split: the mention check would flag the misspelling


def test_paths_from_the_environment(tmp_path):
    assert config_env.task_dirs(env={"KBENCH_TASKS": f"{tmp_path}/a::~/b"}) == [tmp_path / "a", Path.home() / "b"]
    assert config_env.workspace_dir({}) is None
    assert config_env.workspace_dir({"KBENCH_WORKSPACE": "~/ws"}) == Path.home() / "ws"
    assert config_env.cache_root({"KBENCH_CACHE": str(tmp_path)}) == tmp_path
    assert config_env.cache_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "kbench"
    assert config_env.cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) is None


def test_the_secrets_pipe_variable_is_taken_out_of_the_environment(monkeypatch):
    monkeypatch.setenv(config_env.SECRETS_FD_ENV, "7")
    assert config_env.take_secrets_fd() == 7
    assert config_env.SECRETS_FD_ENV not in os.environ
    assert config_env.take_secrets_fd() is None
