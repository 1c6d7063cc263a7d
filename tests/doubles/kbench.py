"""kbench's command line with the fake evaluator at the evaluation seam: no compiler, no GPU.

    python -m tests.doubles.kbench --workspace WS evolve gelu_bias --proposer tuner ...

For tests that run kbench in a child process (from the repository root, or with it on PYTHONPATH). It replaces
engine.evolve.factory.make_evaluator, which engine.service.wiring.default_evaluator_factory looks up at each
call, with a FakeEvaluator (KBENCH_FAKE_EVAL_DELAY: seconds each evaluation takes; the variables that
tests/doubles/evaluator.py names steer it further), and tells the LLM proposers the target is the fake one.
Tests that call engine.cli.main in their own process use `use_fake_evaluator(monkeypatch.setattr)` instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from engine.config.env import env_float
from tests.doubles.evaluator import FakeEvaluator
from tests.paths import REPO

if TYPE_CHECKING:
    from engine.config.sections import Config
    from engine.tasks.model import Task

FAKE_TARGET_NOTE = "the fake evaluator: no compiler, no GPU"
ARGV = [sys.executable, "-m", "tests.doubles.kbench"]     # `kbench` on the fake evaluator, in a child process


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the repository first on PYTHONPATH, so that ARGV finds this package from any folder."""
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)}


def fake_make_evaluator(task: Task, direction: str, config: Config, *, sequential: bool = False) -> FakeEvaluator:
    """engine.evolve.factory.make_evaluator's stand-in: `[eval] profile = "all"` profiles every passing
    candidate, as the real evaluator would."""
    return FakeEvaluator(task, delay_s=env_float("KBENCH_FAKE_EVAL_DELAY"), profile=config.eval.profile == "all")


def use_fake_evaluator(set_attr: Callable[[Any, str, Any], None] = setattr) -> None:
    """Put the fake evaluator at the seam of every session service built after this call (`set_attr`: a
    pytest monkeypatch's setattr, so that the test undoes it)."""
    import engine.evolve.factory
    import engine.service.wiring
    from engine.llm.target import TargetInfo

    set_attr(engine.evolve.factory, "make_evaluator", fake_make_evaluator)
    set_attr(engine.service.wiring, "probed_target", lambda: TargetInfo(note=FAKE_TARGET_NOTE))


def main(argv: list[str] | None = None) -> int:
    from engine.secrets import protect
    protect()       # as engine/cli/__main__.py: keys out of the environment (it re-executes this command line)
    use_fake_evaluator()
    from engine.cli import main as kbench_main
    return kbench_main(argv)


if __name__ == "__main__":
    sys.exit(main())
