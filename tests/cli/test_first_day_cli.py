"""What a newcomer trips over on the command line: every mistake is a message naming the file and the cause
(exit 2), never a traceback, and nothing wrong is accepted in silence. No GPU, no compiler needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import TaskError, TaskWarning
from engine.tasks.loader import load_task
from tests.conftest import cli
from tests.doubles.kbench import use_fake_evaluator
from tests.paths import FIXTURES, REPO

BASELINE = REPO / "tasks" / "softmax" / "baselines" / "forward"


def softmax_copy(tmp_path: Path, name: str = "my_softmax", toml=None, reference=None) -> Path:
    """The built-in softmax task copied into a folder of the user's own, optionally edited."""
    folder = tmp_path / name
    folder.mkdir()
    text = (REPO / "tasks" / "softmax" / "task.toml").read_text()
    ref = (REPO / "tasks" / "softmax" / "reference.py").read_text()
    (folder / "task.toml").write_text(toml(text) if toml else text)
    (folder / "reference.py").write_text(reference(ref) if reference else ref)
    return folder


# ------------------------------------------------------------------------------------------ tracebacks


def test_backward_of_a_forward_only_task_is_a_message(capsys):
    rc, out, err = cli(capsys, "eval", "llama_ffw", str(BASELINE), "--backward")
    assert rc == 2
    assert "Traceback" not in err and err.startswith("kbench: error: ")
    assert "has no backward direction (it has: forward)" in err
    assert str(REPO / "tasks" / "llama_ffw") in err           # names the task's folder
    with pytest.raises(KeyError):                               # still a KeyError for mapping-style callers
        load_task("llama_ffw").spec("backward")


def test_closed_pipe_ends_quietly():
    """`kbench show TASK --json | head -5`: the reader goes away; no BrokenPipeError traceback."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "show", "softmax", "--json"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                       # before kbench writes a byte
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert err == ""


def test_check_task_with_a_reference_that_cannot_be_imported(tmp_path, capsys):
    folder = softmax_copy(tmp_path, reference=lambda r: "import kbench_no_such_module\n" + r)
    rc, out, err = cli(capsys, "check-task", str(folder))
    assert rc == 2 and "Traceback" not in err
    assert str(folder / "reference.py") in err
    assert "ModuleNotFoundError" in err and "kbench_no_such_module" in err


# ------------------------------------------------------------------------------------ silent mistakes


def test_unknown_config_name_is_refused_before_any_compile(capsys):
    rc, out, err = cli(capsys, "eval", "softmax", str(BASELINE), "--config", "odd-smal")
    assert rc == 2 and out == ""
    assert "--config odd-smal" in err and "did you mean 'odd-small'?" in err and "three-cols" in err
    rc, out, err = cli(capsys, "eval", "softmax", str(BASELINE), "--time-config", "nosuch")
    assert rc == 2 and "--time-config nosuch" in err
    rc, out, err = cli(capsys, "check-task", "softmax", "--config", "nosuch")
    assert rc == 2 and "no config of that name" in err


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t.replace("atol = 1e-8", 'atol = "1e-8"'),
     "[forward] atol must be a number, not the string '1e-8': write atol = 1e-8 without quotes"),
    (lambda t: t.replace("[[configs]]", "[[notconfigs]]", 1),
     "unknown key `notconfigs` at the top level (did you mean `configs`?)"),
    (lambda t: t.replace("rtol = 1e-5", "rtoll = 1e-5", 1),
     "unknown key `rtoll` in [forward] (did you mean `rtol`?)"),
    (lambda t: t.replace('init = "normal"', 'inti = "normal"', 1),
     "unknown key `inti` in [[configs]] #1 (odd-small) (did you mean `init`?)"),
    (lambda t: t.replace("seed = 0", 'seed = "0"', 1), "`seed` must be an integer, not the string '0'"),
])
def test_task_toml_mistakes_are_errors_naming_the_file(tmp_path, capsys, edit, expected):
    folder = softmax_copy(tmp_path, toml=edit)
    with pytest.raises(TaskError) as exc:
        load_task(folder)
    assert str(folder / "task.toml") in str(exc.value) and expected in str(exc.value)
    rc, out, err = cli(capsys, "show", str(folder))
    assert rc == 2 and expected in err and "Traceback" not in err


def test_fewer_than_three_configs_loads_with_a_warning(tmp_path, capsys):
    two = lambda t: "[[configs]]".join(t.split("[[configs]]")[:3])   # noqa: E731 - the first two configs
    folder = softmax_copy(tmp_path, toml=two)
    with pytest.warns(TaskWarning, match="2 config\\(s\\); a task needs at least 3"):
        assert len(load_task(folder).configs) == 2
    rc, out, err = cli(capsys, "show", str(folder))
    assert rc == 0 and "odd-small" in out
    assert f"kbench: warning: {folder / 'task.toml'}: 2 config(s)" in err


def test_check_task_says_when_nothing_was_checked(tmp_path, capsys):
    """Every reference run raised: exit 1 naming the error, never "no degenerate config"."""
    folder = softmax_copy(tmp_path, reference=lambda r: r.replace(
        "def forward_fn(x", "def forward_fn(x, *_unused):\n    raise RuntimeError('needs transformers')\n\n\n"
                            "def _old_forward_fn(x", 1))
    rc, out, err = cli(capsys, "check-task", str(folder), "--config", "odd-small", "--config", "three-cols",
                       "--direction", "forward", "--seeds", "1")
    assert rc == 1, out + err
    assert "no degenerate config" not in out
    assert "NOT CHECKED: the reference raised RuntimeError: needs transformers" in out
    assert "the reference raised on 2 config(s)" in out


def test_check_task_exits_3_when_every_config_is_skipped(tmp_path, capsys):
    # a bench config over the CPU limits (by its cost model) alone: skipped, so nothing is checked
    folder = softmax_copy(tmp_path, toml=lambda t: t.replace("rows = 4096, cols = 8192", "rows = 16384, cols = 16384"))
    rc, out, err = cli(capsys, "check-task", str(folder), "--config", "bench", "--direction", "forward",
                       "--device", "cpu")
    assert rc == 3, out + err
    assert "skipped: too large for the CPU check" in out
    assert "nothing was checked: all 1 config(s) were skipped" in out and "no degenerate config" not in out


def test_check_task_size_guard_for_a_problem_without_cost_model(tmp_path, capsys):
    """A KernelBench problem has no cost model: its footprint is measured on torch's meta device (nothing is
    allocated) and a config that holds more than the CPU limit is skipped, not run into the OOM killer."""
    from engine.harness.runtimes import runtime_for
    from engine.integrity.check_task import CPU_MAX_BYTES, footprint_bytes

    src = (FIXTURES / "kernelbench" / "matmul_relu.py").read_text()
    big = tmp_path / "big_matmul.py"
    big.write_text(src.replace("batch_size = 37", "batch_size = 8192").replace("in_features = 200",
                                                                              "in_features = 16384"))
    task = load_task(big)
    held = footprint_bytes(runtime_for(task, "forward"), task.configs[1])   # a uniform-init config too
    # x [8192, 16384] + Linear(16384 -> 129) weight and bias + y [8192, 129], float32
    assert held == 4 * (8192 * 16384 + 16384 * 129 + 129 + 8192 * 129)
    assert held > CPU_MAX_BYTES
    rc, out, err = cli(capsys, "check-task", str(big), "--device", "cpu")
    assert rc == 3, out + err
    assert out.count("skipped: too large for the CPU check: one setup holds 0.55 GB") == len(task.configs)
    small = load_task(FIXTURES / "kernelbench" / "matmul_relu.py")
    assert footprint_bytes(runtime_for(small, "forward"), small.configs[0]) < CPU_MAX_BYTES


def test_workspace_from_environment(tmp_path, capsys, monkeypatch):
    target = tmp_path / "elsewhere"
    monkeypatch.setenv("KBENCH_WORKSPACE", str(target))
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(capsys, "init-workspace")
    assert rc == 0 and str(target) in out
    assert (target / ".git").is_dir() and not (tmp_path / "workspace").exists()
    rc, out, err = cli(capsys, "sessions")
    assert rc == 0 and f"no sessions yet in {target}" in out
    rc, out, err = cli(capsys, "--workspace", str(tmp_path / "flag-wins"), "init-workspace")   # the flag wins
    assert rc == 0 and (tmp_path / "flag-wins" / ".git").is_dir()


def test_plain_git_log_opens_a_new_workspace(tmp_path, capsys):
    path = tmp_path / "ws"
    assert cli(capsys, "--workspace", str(path), "init-workspace")[0] == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    run = lambda *a: subprocess.run(["git", *a], cwd=path, capture_output=True, text=True, env=env)  # noqa: E731
    log = run("log")
    assert log.returncode == 0, log.stderr
    assert "kbench workspace" in log.stdout and "git log sessions/<session>" in log.stdout
    assert log.stderr == ""                                   # no "notes ref ... is invalid"
    status = run("status", "--porcelain")
    assert status.returncode == 0 and status.stdout == ""    # the index commit's tree is empty: nothing to check out
    assert run("symbolic-ref", "HEAD").stdout.strip() == "refs/heads/index"


def test_profile_says_there_is_no_gpu(capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")            # no GPU, whatever this machine has
    rc, out, err = cli(capsys, "profile", "softmax", str(BASELINE))
    assert rc == 3 and out == ""
    assert err.startswith("kbench: no CUDA GPU is visible: profiling") and "nothing was built or run" in err
    rc, out, err = cli(capsys, "profile", "softmax", str(BASELINE), "--json")
    assert rc == 3 and '"status": "skipped"' in out


def test_human_is_a_real_proposer_choice(tmp_path, capsys, monkeypatch):
    """`--proposer human` is accepted; each proposal runs $EDITOR (here a script that appends a line)."""
    use_fake_evaluator(monkeypatch.setattr)
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)
    ws = str(tmp_path / "ws")
    args = ["--workspace", ws, "evolve", "gelu_bias", "--proposer", "human", "--generations", "1",
            "--population", "1"]
    rc, out, err = cli(capsys, *args)
    assert rc == 2 and "the human proposer cannot run: Set $VISUAL or $EDITOR" in err
    editor = tmp_path / "editor.py"
    editor.write_text("import sys\nopen(sys.argv[1], 'a').write('\\n// made faster by hand\\n')\n")
    monkeypatch.setenv("EDITOR", f"{sys.executable} {editor}")
    rc, out, err = cli(capsys, *args)
    assert rc == 0, out + err
    from engine.workspace import Workspace
    with Workspace.open(ws) as w:
        views = w.candidates("gelu_bias-fwd-human")
        assert [v.record.operator for v in views] == ["baseline", "mutate"]
        assert views[1].record.proposer == "human"
        assert "made faster by hand" in w.files(views[1].id).files["kernel.cu"]


def test_a_start_that_cannot_fill_generation_0_writes_nothing(tmp_path, capsys):
    ws = tmp_path / "ws"
    rc, out, err = cli(capsys, "--workspace", str(ws), "evolve", "gelu_bias", "--proposer", "tuner",
                       "--no-baseline")
    assert rc == 2 and "the tuner proposer cannot start this session" in err and "Traceback" not in err
    rc, out, err = cli(capsys, "--workspace", str(ws), "sessions")
    assert "no sessions yet" in out


def test_a_session_that_fails_before_its_first_commit_is_removed(tmp_path):
    """The proposer stops at its first proposal (an LLM refusing, say): the session it created is removed."""
    from tests.doubles.evaluator import FakeEvaluator
    from engine.evolve.loop import Budgets, EvolutionSession
    from engine.proposers.base import Proposal, ProposalStatus
    from engine.workspace import Workspace

    class Stops:
        name = "stopper"
        operators = frozenset({"translate"})

        def propose(self, request):
            return Proposal(ProposalStatus.STOP, self.name, request.operator, reason="no credit left")

    task = load_task("gelu_bias")
    with Workspace.create(tmp_path / "ws") as ws:
        fake = FakeEvaluator(task)
        events = []
        s = EvolutionSession(ws, "gone", task, Stops(), fake, use_baseline=False, budgets=Budgets(population=1))
        s.subscribe(events.append)
        stopped = s.run()
        fake.close()
        assert "the proposer stopped: no credit left" in stopped.reason
        assert ws.sessions() == []
        assert any(e.kind == "Log" and "session gone was not kept" in e.message for e in events)


def test_readme_bring_your_own_task_example_loads(tmp_path):
    """The README's example task is a real one: it loads without a warning and its reference runs."""
    import re
    import warnings

    text = (REPO / "README.md").read_text()
    section = text[text.index("## Bring your own task"):]
    section = section[:section.index("\n## ", 5)]
    assert "docs/formats.md" in section and "KBENCH_TASKS" in section
    blocks = dict((kind, body) for kind, body in re.findall(r"```(python|toml)\n(.*?)```", section, re.S))
    folder = tmp_path / "scaled_tanh"
    folder.mkdir()
    (folder / "reference.py").write_text(blocks["python"])
    (folder / "task.toml").write_text(blocks["toml"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        task = load_task(folder)
    assert [c.name for c in task.configs] == ["odd", "wide", "bench"]
    from engine.integrity.check_task import check_task
    rows = check_task(task, seeds=1, device="cpu", configs=["odd"])
    assert rows[0].checked and not rows[0].degenerate


def test_init_workspace_gives_an_older_workspace_a_head(tmp_path, capsys):
    """A workspace made before new ones got a HEAD: `kbench init-workspace` adds the index branch and points
    HEAD at it, touching no other ref; run again, it has nothing to do."""
    path = tmp_path / "old"
    assert cli(capsys, "--workspace", str(path), "init-workspace")[0] == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    git = lambda *a: subprocess.run(["git", *a], cwd=path, capture_output=True, text=True, env=env)  # noqa: E731
    git("symbolic-ref", "HEAD", "refs/heads/master")          # as `git init` left the older ones
    git("update-ref", "-d", "refs/heads/index")
    notes = git("rev-parse", "refs/notes/kbench").stdout
    assert git("log").returncode != 0
    rc, out, err = cli(capsys, "--workspace", str(path), "init-workspace")
    assert rc == 0 and "HEAD is now the branch 'index'" in out
    assert git("log").returncode == 0 and git("rev-parse", "refs/notes/kbench").stdout == notes
    rc, out, err = cli(capsys, "--workspace", str(path), "init-workspace")
    assert rc == 0 and "HEAD is now" not in out
