"""GPU: the judge's and the runner's peak GPU memory for one problem stay within a small multiple of the problem's
footprint (one variant's inputs, weights and reference outputs), measured per config and printed as MEMORY-ROW.

    python -m pytest -q -m gpu tests/pipeline/test_gpu_memory.py -rA -s

Seen on an H200 before: the judge alone held 25-37 GiB on KernelBench level 1 problems 23, 24 and 36 (a second
copy of every variant's inputs as the call plan, every checked output of a job at once, every timed config kept on
both sides until the timing phase). The CPU accounting of the same is tests/pipeline/test_judge_memory.py and
tests/pipeline/test_digest.py.
"""

from __future__ import annotations

import pytest

from engine.candidates import Candidate
from engine.pipeline.eval_types import EvalOptions
from engine.pipeline.evaluate import evaluate
from engine.pipeline.judge.evaluation import KEEP_MAX_BYTES
from engine.tasks.loader import load_task
from tests.paths import FIXTURES

pytestmark = pytest.mark.gpu

BIG = FIXTURES / "kernelbench" / "big_softmax.py"
# The judge: one variant's inputs, a copy for the reference and its output while a variant is prepared (the others
# parked in host memory); one reference and one candidate output while comparing. The runner: each of the two
# variants' inputs, the live ones, the call's output and the previous call's (the persistence check): 2.5x here;
# the other configs it keeps prepared for their timing meanwhile are bounded by the judge's share of the GPU
# (KEEP_FOR_TIMING) and by KEEP_MAX_BYTES, not by the problem, and reported apart (runner_kept).
JUDGE_MULTIPLE = 3.0
RUNNER_MULTIPLE = 3.0


def test_the_judge_and_the_runner_of_a_1_gib_softmax_hold_a_small_multiple_of_its_footprint(gpu_to_itself):
    """With every config's variants parked (gpu_keep=0: what a problem too large for the judge's share of the GPU
    gets, so what any problem needs at the least)."""
    cand = Candidate("kernelbench", {"own_model.py": BIG.read_text() + "\n\nclass ModelNew(Model):\n    pass\n"},
                     name="own-model")
    rep = evaluate(load_task(BIG), cand, "forward",
                   EvalOptions(trials=2, override_static=True, profile=False, baselines=("eager",), gpu_keep=0.0))
    assert rep.passed and not rep.unmeasured, rep.to_json()["verdicts"]
    assert rep.memory and set(rep.memory) == {r.name for r in rep.rows}
    for name, m in rep.memory.items():
        fp = m["footprint"]
        judge, runner = m["judge_allocated"] / fp, (m["runner_allocated"] or 0) / fp
        print(f"MEMORY-ROW | big_softmax {name} | footprint {fp >> 20} MiB | judge {m['judge_allocated'] >> 20} MiB "
              f"({judge:.2f}x, reserved {m['judge_reserved'] >> 20} MiB) | runner {(m['runner_allocated'] or 0) >> 20} "
              f"MiB ({runner:.2f}x), beside {(m.get('runner_kept') or 0) >> 20} MiB kept for other configs' timing")
        assert judge <= JUDGE_MULTIPLE and runner <= RUNNER_MULTIPLE, (name, m)
        assert (m.get("runner_kept") or 0) <= KEEP_MAX_BYTES, (name, m)


def test_a_parked_tensor_is_one_page_locked_copy_with_its_layout():
    """engine/pipeline/judge/parking.py: a GPU tensor parked in host memory lands page-locked (a copy back runs at full
    speed) with its values, shape, strides and grad flag; one tensor reached twice is parked once."""
    import torch
    from engine.pipeline.judge.parking import moved
    x = torch.randn(64, 96, device="cuda").t()           # a transposed view: strides (1, 96)
    w = torch.randn(8, device="cuda", requires_grad=True)
    memo: dict = {}
    parked = moved({"x": x, "again": [x], "w": w}, "cpu", memo)
    host = parked["x"]
    assert host.device.type == "cpu" and host.is_pinned() and parked["again"][0] is host
    assert host.shape == x.shape and host.stride() == x.stride() and torch.equal(host, x.cpu())
    assert parked["w"].requires_grad and parked["w"].is_pinned()
    back = moved(host, "cuda", {})
    assert back.is_cuda and torch.equal(back, x)


def test_a_config_within_the_judges_share_stays_on_the_gpu_and_a_larger_one_is_parked():
    """prepare(): a config whose variants fit in `park_above` bytes keeps them on the GPU (the check reads them with
    no copy each way); one that does not is parked in host memory, every variant of it."""
    import torch
    from engine.harness.runtimes import runtime_for
    from engine.pipeline.judge.configs import footprint, held_bytes, prepare
    task = load_task("llama_rmsnorm")
    cfg = next(c for c in task.configs if c.name == "bench")
    kept = prepare(runtime_for(task, "forward"), cfg, 2, torch.device("cuda"), park_above=1 << 40)
    assert not any(v.parked for v in kept.variants) and held_bytes(kept) >= 2 * footprint(kept)
    del kept
    small = 2 * (2 * 8 * 2048 * 4096 * 4) - 1   # just under two variants of x and y
    parked = prepare(runtime_for(task, "forward"), cfg, 2, torch.device("cuda"), park_above=small)
    assert all(v.parked for v in parked.variants) and held_bytes(parked) < footprint(parked)
