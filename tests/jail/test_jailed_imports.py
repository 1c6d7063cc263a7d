"""What runs jailed (the runner, the profile child) reaches the standard library and torch only: the jail's import
path holds nothing else, so a module they import must not need pydantic, the LLM SDKs, git libraries or textual."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.paths import REPO

OUT_OF_REACH = ("pydantic", "pydantic_core", "anthropic", "openai", "httpx", "textual", "rich", "gitdb", "git",
                "filelock", "tree_sitter", "pynvml", "ray", "matplotlib")


def test_the_jailed_entry_points_read_a_task_without_third_party_packages():
    code = textwrap.dedent(f"""
        import sys
        for name in {OUT_OF_REACH!r}:
            sys.modules[name] = None          # an import of it raises ImportError, as in the jail
        import engine.pipeline.runner, engine.pipeline.runner.profile_child
        from engine.harness.runtimes import runtime_for
        from engine.tasks.loader import load_task
        from engine.tasks.model import Task
        for name in ("llama_rmsnorm", "layernorm", "mnist_linear"):
            task = load_task(name)
            back = Task.from_json(task.to_json())      # what the profile child reads from its request
            assert [c.to_json() for c in back.configs] == [c.to_json() for c in task.configs], name
            runtime_for(back, "forward")
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
