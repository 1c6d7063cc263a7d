"""A task shipped to another machine (a Ray worker) is the same task there: same configs and tolerances,
and its reference, loaded from the new folder, computes the same outputs."""

from __future__ import annotations

import json

import pytest
import torch

from engine.harness.runtimes.native import NativeRuntime
from engine.tasks.loader import load_task
from engine.tasks.portable import pack_task, unpack_task


@pytest.mark.parametrize("name", ["layernorm", "rotary"])
def test_a_shipped_task_is_the_same_task(name, tmp_path):
    task = load_task(name)
    packed = json.loads(json.dumps(pack_task(task)))           # it crosses the wire as JSON
    assert "task.toml" in packed["files"] and "baselines" not in "".join(packed["files"])
    there = unpack_task(packed, tmp_path / "worker")
    assert there.configs == task.configs and there.directions.keys() == task.directions.keys()
    for d, spec in there.directions.items():
        assert spec.tolerance == task.directions[d].tolerance
        assert spec.reference_path.parent != task.directions[d].reference_path.parent
        assert spec.reference_path.read_text() == task.directions[d].reference_path.read_text()
    assert unpack_task(packed, tmp_path / "worker").directions == there.directions   # a second unpack reuses it
    config = task.configs[0]
    outs = []
    for t in (task, there):
        rt = NativeRuntime(t, "forward")
        assert rt.ref.__file__ == str(t.directions["forward"].reference_path)    # each from its own folder
        rt.setup(config, seed=config.seed, device="cpu")
        outs.append(rt.reference(rt.pristine()))
    assert len(outs[0]) == len(outs[1])
    for a, b in zip(outs[0], outs[1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_unsafe_file_names_are_refused(tmp_path):
    packed = pack_task(load_task("softmax"))
    packed["files"]["../evil.py"] = "import os"
    with pytest.raises(ValueError, match="unsafe task file name"):
        unpack_task(packed, tmp_path)
