"""One re-evaluation, two entry points: `kbench reevaluate ID` and the app's re-evaluation (kbench_tui's queue)
run the session service's one implementation, so they write the same notes for the same re-evaluation: the
verdicts (every one by `reevaluate`, the on-demand profile's too), the measurement and the `reevaluated` event,
whose data alone says who asked (`by: reevaluate` or `by: tui`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.cli import main
from engine.config.sections import Config
from engine.service.session_service import SessionService
from engine.service.spec import SessionSpec
from engine.workspace import Measurement, VerdictNote, Workspace
from engine.workspace.writers import held_claim
from tests.doubles.evaluator import fake_evaluator_factory
from tests.doubles.kbench import use_fake_evaluator
from tests.doubles.tui import fake_backend

SESSION = "gelu_bias-fwd-tuner"


@pytest.fixture
def base(tmp_path, monkeypatch):
    """A tuner session evolved with the fake evaluator; returns (workspace folder, a measured candidate)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))      # no user config: the workspace's decides
    path = tmp_path / "base"
    with Workspace.create(path) as ws:
        svc = SessionService(ws, Config(), env={}, evaluator_factory=fake_evaluator_factory())
        run = svc.start(SessionSpec(task="gelu_bias", proposer="tuner", generations=1, population=2),
                        background=False)
        run.session.run()
        run.close()
        cid = next(v.id for v in ws.candidates(SESSION)[1:] if v.status.measurement is not None)
    return path, cid


def copy_of(base: Path, to: Path, profile: str) -> Path:
    shutil.copytree(base, to, symlinks=True)
    (to / ".kbench").mkdir(exist_ok=True)
    (to / ".kbench" / "config.toml").write_text(f'[eval]\nprofile = "{profile}"\n')
    return to


def new_notes(path: Path, cid: str, before: int) -> list:
    with Workspace.open(path) as ws:
        return ws.notes(cid)[before:]


def comparable(entries: list) -> list[dict]:
    """The notes as written, less what differs from one run to the next (when) and who asked."""
    out = []
    for e in entries:
        obj = e.to_obj()
        obj.pop("at", None)
        if isinstance(e, Measurement):
            obj.get("data", {}).pop("seconds", None)     # wall time of the evaluation
        if obj.get("kind") == "event":
            obj["data"] = {k: v for k, v in obj["data"].items() if k != "by"}
        out.append(obj)
    return out


@pytest.mark.parametrize("profile", ["best", "off"])
def test_cli_and_app_write_the_same_notes(base, tmp_path, profile, monkeypatch):
    use_fake_evaluator(monkeypatch.setattr)          # both re-evaluate on the fake evaluator
    path, cid = base
    with Workspace.open(path) as ws:
        before = len(ws.notes(cid))
    cli = copy_of(path, tmp_path / "cli", profile)
    app = copy_of(path, tmp_path / "app", profile)

    assert main(["--workspace", str(cli), "reevaluate", cid]) == 0

    heard, claims = [], []
    backend = fake_backend(app)
    claim = backend.ws.claim
    backend.ws.claim = lambda session, command, **kw: claims.append((session, command)) or claim(session, command, **kw)
    try:
        done = backend.reevaluate(cid, heard.append)
        assert claims == [(SESSION, "kbench app")]                   # the session's one writer while it ran,
        assert held_claim(backend.ws.git_dir, SESSION) is None       # and no longer after
    finally:
        backend.close()

    by_cli, by_app = new_notes(cli, cid, before), new_notes(app, cid, before)
    assert comparable(by_cli) == comparable(by_app)

    verdicts = [e for e in by_app if isinstance(e, VerdictNote)]
    stages = [e.stage for e in verdicts]
    assert ("profile" in stages) is (profile == "best")               # on demand for a candidate asked for by id
    assert {e.by for e in verdicts} == {"reevaluate"}
    assert [v.stage for v in heard] == stages                        # the app heard every stage it noted
    assert sum(isinstance(e, Measurement) for e in by_app) == 1
    (ev_cli,) = [e for e in by_cli if getattr(e, "event", None) == "reevaluated"]
    (ev_app,) = [e for e in by_app if getattr(e, "event", None) == "reevaluated"]
    assert ev_cli.data["by"] == "reevaluate" and ev_app.data["by"] == "tui"
    assert done.summary.endswith("x on FakeGPU"), done.summary
