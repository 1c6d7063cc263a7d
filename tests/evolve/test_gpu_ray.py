"""`kbench evolve --executor ray` on a real GPU: a local Ray instance over this machine's GPUs, compiles in
Ray CPU tasks, the check + time in Ray GPU tasks (one GPU each), every candidate recorded in the workspace."""

from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray")

from engine.cli import main  # noqa: E402
from engine.workspace import Workspace  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_tuner_session_through_ray(tmp_path, capsys):
    import torch  # lazy: torch is heavy, and only this GPU test needs it (a CPU-only run collects, then skips it)

    if ray.is_initialized():
        ray.shutdown()
    stats = tmp_path / "stats.json"
    rc = main(["--workspace", str(tmp_path / "ws"), "evolve", "gelu_bias", "--proposer", "tuner",
               "--executor", "ray", "--generations", "1", "--population", "3", "--no-compile-baseline",
               "--time-config", "bench", "--no-profile", "--session", "ray-gpu", "--stats-json", str(stats)])
    out = capsys.readouterr().out
    print(out)
    assert rc == 0, out
    st = json.loads(stats.read_text())
    assert st["executor"] == "ray" and st["gpus"] == torch.cuda.device_count()
    assert st["completed"] == 4 and st["infrastructure_failures"] == 0
    with Workspace.open(tmp_path / "ws") as ws:
        views = ws.candidates("ray-gpu")
        assert len(views) == 4 and views[0].record.operator == "baseline"
        gpu = torch.cuda.get_device_name(0)
        for v in views:
            assert v.status.status_of("compile").value == "pass", v.status.stages
            assert v.status.status_of("correctness") is not None
        measured = [v for v in views if v.status.measurement is not None]
        assert measured and all(v.status.measurement.gpu == gpu for v in measured)
        assert ws.best("ray-gpu").speedup >= views[0].speedup
