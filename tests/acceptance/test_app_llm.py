"""The app as a user with a key meets it: `kbench` with no command, in a terminal, the key in the environment,
the README's own example task in a folder of the user's (KBENCH_TASKS), a session started from the
new-session form, the Messages API behind the rule-enforcing stand-in."""

from __future__ import annotations

import json
import re
import time

from tests.acceptance.conftest import ANTHROPIC_KEY, KBENCH
from tests.acceptance.terminal import Terminal
from tests.paths import REPO
from tests.standins.scripted import ScriptedModel

SESSION = "scaled_tanh-fwd-anthropic"


def readme_task(user) -> str:
    """The README's "Bring your own task" example, written where the README puts it (my_tasks/scaled_tanh)."""
    readme = (REPO / "README.md").read_text()
    for name in ("reference.py", "task.toml"):
        block = re.search(r"```\w*\n# my_tasks/scaled_tanh/" + re.escape(name) + r"\n(.*?)```", readme, re.DOTALL)
        assert block, f"the README has no my_tasks/scaled_tanh/{name} example"
        path = user.home / "my_tasks" / "scaled_tanh" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.group(1))
    user.env["KBENCH_TASKS"] = str(user.home / "my_tasks")
    return "scaled_tanh"


def test_the_app_with_a_key_starts_an_llm_session_from_its_form(user, claude):
    claude.respond(ScriptedModel())
    task = readme_task(user)
    listed = user.run("tasks", "--json")
    assert listed.returncode == 0, listed.stderr
    order = [t["name"] for t in json.loads(listed.stdout)["tasks"]]
    term = Terminal([str(KBENCH)], cwd=user.cwd, env=user.env)
    try:
        home = term.wait_for(lambda t: "Tasks (enter: new session)" in t and task in t, 90, "the home screen")
        assert "No ANTHROPIC_API_KEY" not in home and "proposer and the LLM verifiers are off" not in home
        for _ in range(order.index(task)):          # no session yet: the tasks table has the focus
            term.send("j", 0.05)
        term.send("n")
        # the form draws over a few frames: wait for its task and proposer fields, not only its title
        term.wait_for(lambda t: "New evolution session" in t and task in t and "anthropic" in t, 30,
                      "the new-session form with the README's task and the anthropic proposer")
        term.send("\x13")                            # ctrl+s: Start
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
                r.json["tools"][0]["name"] == "submit_kernel" for r in claude.messages()):
            time.sleep(0.3)
        term.wait_for(lambda t: f"{SESSION}-g0-1" in t, 60, "the first committed candidate on the session screen")
    finally:
        term.close()
    posts = claude.messages()
    assert posts and claude.rejected == [], (claude.rejected, term.text())
    assert all(ANTHROPIC_KEY in r.headers.get("authorization", "") + r.headers.get("x-api-key", "") for r in posts)
    log = user.run("log", SESSION, "--json")
    assert log.returncode == 0, log.stderr
    cands = json.loads(log.stdout)["candidates"]
    assert cands and all(c["proposer"] == "anthropic" and c["operator"] == "translate" for c in cands), cands


def test_the_app_shows_the_answers_that_gave_no_candidate(user, claude):
    claude.respond(ScriptedModel(behaviour="prose"))
    out = user.run("evolve", "gelu_bias", "--proposer", "anthropic", "--no-baseline", "--population", "1",
                   "--no-verify")
    assert out.returncode == 1, out.stdout + out.stderr
    term = Terminal([str(KBENCH)], cwd=user.cwd, env=user.env)
    try:
        term.wait_for(lambda t: "gelu_bias-fwd-anthropic" in t, 90, "the session on the home screen")
        term.send("\r")                                # the sessions table has the focus: open it
        term.wait_for(lambda t: "3 failed proposal(s): F reads them" in t, 30, "the session's failed proposals")
        term.send("F")
        shown = term.wait_for(lambda t: "fuse the bias add into the GELU" in t, 30, "the whole answer")
        assert "answered with prose instead of calling submit_kernel" in shown
    finally:
        term.close()
