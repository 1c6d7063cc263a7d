"""engine.llm.prompts: template files, the placeholder syntax, overrides; every built-in prompt renders."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.paths import FIXTURES, LLM_FIXTURES

sys.path.insert(0, str(LLM_FIXTURES))
from llm_testkit import layernorm, parent_candidate  # noqa: E402,F401

from engine.llm import render  # noqa: E402
from engine.llm.prompts import BUILTIN_DIR, PromptError, Template, load_template, template_names  # noqa: E402


def t(text: str) -> Template:
    return Template("t", text, Path("t.md"))


def test_placeholders_optional_and_comments():
    tpl = t("{{! explain the template }}\nHello {{name}}{{ suffix? }}.\n")
    assert tpl.render(name="GPU") == "Hello GPU.\n"
    assert tpl.render(name="GPU", suffix="s") == "Hello GPUs.\n"
    assert tpl.placeholders() == {"name", "suffix"}
    with pytest.raises(PromptError, match=r"no value for \{\{name\}\}"):
        tpl.render()


def test_if_blocks_nest_and_drop_empty_values():
    tpl = t("a\n{{#if x}}\nx={{x}}\n{{#if y}}\ny={{y}}\n{{/if}}\n{{/if}}\nb\n")
    assert tpl.render(x="1", y="2") == "a\nx=1\ny=2\nb\n"
    assert tpl.render(x="1", y="") == "a\nx=1\nb\n"
    assert tpl.render(x="", y="2") == "a\nb\n"  # y's block sits inside x's
    assert tpl.placeholders() == {"x", "y"}


def test_values_are_not_rescanned():
    code = "dim3 grid{{1, 2}}; // {{name}}"
    assert t("{{code}}").render(code=code) == code + "\n"


@pytest.mark.parametrize("text, msg", [("{{/if}}\n", "without"), ("{{#if a}}\nx\n", "never closed")])
def test_malformed_blocks(text, msg):
    with pytest.raises(PromptError, match=msg):
        t(text).render(a="1")


def test_override_dir_shadows_one_file(tmp_path):
    (tmp_path / "mutate.md").write_text("custom {{parent_name}}")
    assert load_template("mutate", tmp_path).render(parent_name="p") == "custom p\n"
    assert load_template("repair", tmp_path).path == BUILTIN_DIR / "repair.md"
    with pytest.raises(PromptError, match="no prompt template 'nope'"):
        load_template("nope", tmp_path)


def test_builtin_templates_exist():
    assert {"system", "context", "translate", "mutate", "crossover", "repair", "meta", "verify_system",
            "verify_compile", "verify_memory", "verify_numerics"} <= set(template_names())


def test_every_builtin_renders_for_a_real_task(layernorm):
    parent = parent_candidate()
    values = {**render.context_values(layernorm, "forward"), "directives": "- use float4", "insights": "- x",
              "feedback": "error: identifier undefined", "hints": "h", "population": "1. a", "parent": render.render_candidate(parent),
              "parent_name": "p", "parent_summary": "1.2x", "parent_a": "A", "parent_a_name": "a",
              "parent_a_summary": "", "parent_b": "B", "parent_b_name": "b", "parent_b_summary": "",
              "candidate": render.render_candidate(parent)}
    for name in template_names():
        text = load_template(name).render(values)
        assert "{{" not in text and text.strip(), name
    ctx = load_template("context").render(values)
    assert "def forward_fn" in ctx and "odd-small" in ctx and "atol=1e-05" in ctx
    assert "Backward contract" not in ctx
    back = load_template("context").render(render.context_values(layernorm, "backward"))
    assert "Backward contract" in back and "candidate.backward(grad_output" in back


def test_candidate_rendering_puts_the_kernel_first():
    text = render.render_candidate(parent_candidate())
    assert text.index("### kernel.cu") < text.index("### binding.cpp") and "```cuda" in text


def test_the_context_marks_the_configs_timed_by_default():
    from engine.tasks.loader import load_task

    ctx = load_template("context").render(render.context_values(load_task("llama_rmsnorm"), "forward"))
    marked = [line.split("`")[1] for line in ctx.splitlines() if line.startswith("- `") and line.endswith("; timed")]
    assert marked == ["bench", "rkb-single-1"]
    assert 'by default those marked "timed" below' in ctx
    kb = render.render_configs(load_task(str(FIXTURES / "kernelbench" / "matmul_relu.py")))
    assert "timed" not in kb                    # every config is timed: none is marked
