"""`kbench check-task` reports vacuous tolerances (0 within atol for most values) and tolerances an output
more accurate than eager would fail, with the reference's own error against float64."""

from __future__ import annotations

import shutil

from engine.cli import main
from engine.integrity.check_task import check_task
from engine.tasks.loader import load_task
from tests.paths import FIXTURES, REPO


def test_vacuous_and_reference_error_reported_per_config():
    rows = {r.config: r for r in check_task(load_task("softmax"), seeds=1, device="cpu", directions=["forward"],
                                            configs=["large-logits", "odd-small"])}
    big, small = rows["large-logits"], rows["odd-small"]
    assert big.vacuous >= 0.9 and any(w.startswith("vacuous tolerance") for w in big.warnings)
    assert small.vacuous < 0.5 and not small.warnings
    for r in (big, small):
        assert r.ref_error is not None and 0 < r.ref_error < 1e-5   # float32 softmax vs float64
        assert not r.degenerate                                     # the scale-aware checks reject trivial outputs


def test_too_tight_tolerance_is_a_warning(tmp_path, capsys):
    dst = tmp_path / "tight"
    shutil.copytree(REPO / "tasks" / "softmax", dst)
    toml = dst / "task.toml"
    text = toml.read_text()
    head, rest = text.split("[forward]", 1)
    fwd, tail = rest.split("[backward]", 1)
    import re
    fwd = re.sub(r"(?m)^atol = .*$", "atol = 0.0", fwd)
    fwd = re.sub(r"(?m)^rtol = .*$", "rtol = 0.0", fwd)
    toml.write_text(head + "[forward]" + fwd + "[backward]" + tail)
    rows = check_task(load_task(str(dst)), seeds=1, device="cpu", directions=["forward"], configs=["odd-small"])
    assert any(w.startswith("too tight") for w in rows[0].warnings), rows[0].warnings
    assert main(["check-task", str(dst), "--seeds", "1", "--direction", "forward", "--config", "odd-small"]) == 0
    out = capsys.readouterr().out
    assert "warning: too tight" in out and "ref-err" in out


def test_kernelbench_softmax_shape_is_vacuous_but_trivial_outputs_no_longer_pass():
    """KernelBench's softmax shape: at fp16's tolerance (1e-2) 0 is within atol everywhere, at fp32's (1e-4)
    still for most values; yet neither zeros, nor a constant, nor the output for other inputs passes the
    scale-aware comparison."""
    path = FIXTURES / "kernelbench" / "vacuous" / "softmax_wide.py"
    half = check_task(load_task(f"{path}@fp16"), seeds=1, device="cpu", configs=["seed0"])
    assert half[0].vacuous == 1.0 and half[0].warnings, half[0]
    task = load_task(str(path))
    rows = check_task(task, seeds=1, device="cpu", configs=["seed0"])
    assert rows[0].vacuous > 0.8 and rows[0].warnings and not rows[0].degenerate, rows[0]
