"""The numeric settings (engine/harness/numerics.py): the judge's, applied by the real jailed runner before the
candidate is imported, and recorded in what `kbench eval` reports. The GPU half (a KernelBench convolution whose
own Model passes as its ModelNew; a candidate that turns TF32 on itself is judged on its outputs) is
tests/pipeline/test_gpu_numerics.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from engine.harness import numerics
from engine.harness.numerics import JUDGE, Numerics
from engine.jail import landlock
from engine.pipeline.judge import runner_link as judge_runner
from engine.pipeline.protocol.types import CandidateSpec
from tests.kbench_procs import run, runner_without_gpu
from tests.paths import FIXTURES

KBENCH = Path(sys.executable).with_name("kbench")

# A candidate that refuses to import unless torch's switches are the ones it was told to expect: what a ModelNew
# built of nn layers computes depends on them from its first line on.
PROBE = '''
import torch
from torch.backends import cuda, cudnn
SEEN = {"matmul_tf32": cuda.matmul.allow_tf32, "cudnn_tf32": cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "fp16_reduced_precision_reduction": cuda.matmul.allow_fp16_reduced_precision_reduction,
        "bf16_reduced_precision_reduction": cuda.matmul.allow_bf16_reduced_precision_reduction,
        "cudnn_benchmark": cudnn.benchmark, "cudnn_deterministic": cudnn.deterministic,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled()}
if SEEN != EXPECTED:
    raise ImportError(f"imported under {SEEN}")
def forward(*args):
    return args[0]
'''


@pytest.fixture
def restore_numerics():
    before = numerics.current()
    yield
    numerics.apply(before)


def test_apply_then_current_round_trips_every_switch(restore_numerics):
    other = Numerics(matmul_tf32=True, cudnn_tf32=True, float32_matmul_precision="high",
                     fp16_reduced_precision_reduction=False, bf16_reduced_precision_reduction=False,
                     cudnn_benchmark=True, cudnn_deterministic=True, deterministic_algorithms=True)
    numerics.apply(other)
    assert numerics.current() == other
    numerics.apply(JUDGE)
    assert numerics.current() == JUDGE
    assert not JUDGE.matmul_tf32 and not JUDGE.cudnn_tf32 and JUDGE.float32_matmul_precision == "highest"


def test_the_wire_form_is_read_strictly():
    assert Numerics.from_json(JUDGE.to_json()) == JUDGE
    with pytest.raises(ValueError, match="must be a bool"):
        Numerics.from_json({**JUDGE.to_json(), "cudnn_tf32": 1})
    with pytest.raises(ValueError, match="are not"):
        Numerics.from_json({**JUDGE.to_json(), "extra": True})


@pytest.mark.skipif(landlock.abi_version() < 1, reason="this kernel has no Landlock")
@pytest.mark.skipif(torch.cuda.is_available(), reason="the runner's no-GPU path: a stand-in timer cannot load")
@pytest.mark.parametrize("sent", [JUDGE, Numerics(cudnn_tf32=True, cudnn_benchmark=True)], ids=["judge", "other"])
def test_the_jailed_runner_imports_the_candidate_under_the_settings_the_judge_sent(tmp_path, monkeypatch, sent):
    """torch's own default has cuDNN's TF32 on: a runner that left it so fails the probe with the judge's settings;
    with other settings sent, the probe sees those (the runner applies the judge's message, not a default)."""
    monkeypatch.setattr(judge_runner, "JUDGE", sent)
    src = tmp_path / "probe.py"
    src.write_text(f"EXPECTED = {sent.to_json()!r}\n" + PROBE)
    with runner_without_gpu(tmp_path) as (link, deadline):
        assert link.load(CandidateSpec("native", "kb_probe", py_path=str(src)), "forward", deadline) is None


@pytest.mark.skipif(not KBENCH.exists(), reason="the kbench console script is not installed beside this Python")
def test_kbench_eval_reports_the_settings_it_judged_under(tmp_path):
    """The installed `kbench` names the settings a judge computed under in its JSON report; with a GPU the
    correctness verdict's data carries them too (test_gpu_numerics). Here no GPU can be visible, so no judge starts
    (exit code 3, unmeasured) and the report claims no settings: nothing was judged under any."""
    problem = FIXTURES / "kernelbench" / "scaled_swish.py"
    cand = FIXTURES / "exploits" / "honest.py"
    (tmp_path / "home").mkdir()
    out = run([str(KBENCH), "--workspace", str(tmp_path / "ws"), "eval", str(problem), str(cand), "--json",
               "--no-timing", "--override-static"], env={"HOME": str(tmp_path / "home")}, timeout=600)
    assert out.returncode in (0, 1, 3), out.stderr[-3000:]
    report = json.loads(out.stdout)
    if out.returncode == 3:   # compiled, not checked: no judge ran
        assert report["numerics"] == {} and not report["passed"], report
    else:
        assert report["numerics"] == JUDGE.to_json(), report
