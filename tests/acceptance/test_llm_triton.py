"""An LLM session that may answer in Triton, started as a user does: `[llm] languages = ["cuda", "triton"]` in
~/.config/kbench/config.toml, the installed `kbench evolve`, the Messages API behind the rule-enforcing stand-in.
The prompt offers the Triton launcher and submit_kernel takes kernel_py; the Triton answers are committed with
their generated binding.py and compile (an import check in the jail) on this machine without a GPU (exit 3).
Without the key in the config, neither is offered."""

from __future__ import annotations

import itertools
import json

import pytest

from tests.paths import FIXTURES
from tests.standins.scripted import ScriptedModel

TRITON = (FIXTURES / "triton" / "llama_rmsnorm_forward" / "kernel.py").read_text()


def triton_variants():
    for i in itertools.count(1):
        yield {"name": f"triton-rows-{i}", "rationale": f"Variant {i}: two passes per row in Triton.",
               "kernel_py": TRITON.replace("BLOCK_H = 1024", f"BLOCK_H = 1024  # variant {i}")}


@pytest.mark.slow
def test_an_llm_session_with_triton_enabled_offers_it_and_commits_triton_candidates(user, claude):
    user.config('[llm]\nlanguages = ["cuda", "triton"]\n')
    claude.respond(ScriptedModel(kernels=triton_variants()))
    out = user.run("evolve", "llama_rmsnorm", "--proposer", "anthropic", "--generations", "1", "--population", "2",
                   timeout=900)
    text = out.stdout + out.stderr
    assert claude.rejected == [], claude.rejected
    kernel_posts = [r for r in claude.messages() if r.json["tools"][0]["name"] == "submit_kernel"]
    assert kernel_posts, text
    for r in kernel_posts:
        props = r.json["tools"][0]["input_schema"]["properties"]
        assert {"kernel_cu", "kernel_py"} <= set(props), props
        assert "## Triton answers" in json.dumps(r.json["system"]) + json.dumps(r.json["messages"])
        assert "def kb_forward(x, w, eps, y, B, S, H):" in json.dumps(r.json)
    assert out.returncode == 3, text
    listing = user.run("log", "llama_rmsnorm-fwd-anthropic", "--json")
    cands = [c for c in json.loads(listing.stdout)["candidates"] if c["operator"] != "baseline"]
    assert len(cands) == 2, cands
    for c in cands:
        assert c["verdicts"]["compile"] == "pass" and c["verdicts"]["static"] == "pass", c
    assert user.run("checkout", cands[0]["id"], "mine").returncode == 0
    mine = user.cwd / "mine"
    assert sorted(p.name for p in mine.iterdir()) == ["binding.py", "kernel.py"]
    assert "# variant" in (mine / "kernel.py").read_text()


def test_without_triton_in_languages_the_prompt_and_the_tool_stay_cuda(user, claude):
    user.config('[llm]\nlanguages = ["cuda"]\n')
    claude.respond(ScriptedModel(behaviour="prose"))
    user.run("evolve", "llama_rmsnorm", "--proposer", "anthropic", "--generations", "1", "--population", "1",
             timeout=600)
    posts = [r for r in claude.messages() if r.json["tools"][0]["name"] == "submit_kernel"]
    assert posts
    assert all("kernel_py" not in r.json["tools"][0]["input_schema"]["properties"] for r in posts)
    assert all("## Triton answers" not in json.dumps(r.json) for r in posts)


def test_a_language_kbench_does_not_know_is_one_clear_error(user):
    user.config('[llm]\nlanguages = ["cuda", "mojo"]\n')
    out = user.run("evolve", "llama_rmsnorm", "--proposer", "anthropic", "--generations", "1", timeout=120)
    assert out.returncode == 2 and "[llm] languages" in out.stderr and "mojo" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
