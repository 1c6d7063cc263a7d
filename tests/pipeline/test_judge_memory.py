"""Whose lack it is when the judge cannot hold what a config needs (engine/pipeline/judge/memory.py), and what a
config needs (engine/pipeline/judge/configs.py: footprint).

Seen on an H200 with eight evaluations at once: KernelBench's `89_cumsum` and level 2 problem 5, offered their own
Model as ModelNew, were failed because "the candidate's outputs exhausted the judge's GPU memory at output 0 of
iteration 0 (4096 MiB)": outputs exactly the reference's size. Such an output is an allocation the judge makes for
any candidate; one of another shape or dtype stays the candidate's doing."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from engine.harness.runtimes import runtime_for
from engine.pipeline.judge import main as judge_main
from engine.pipeline.protocol import wire
from engine.pipeline.judge.main import ResultFile
from engine.pipeline.judge.configs import footprint, held_bytes, plan_message, prepare, reference_outputs, storages
from engine.pipeline.judge.evaluation import Judge
from engine.pipeline.judge.memory import CANDIDATE_SLACK, MemoryBlame, config_share, judge_memory_outcome
from engine.pipeline.protocol.result import JudgeResult
from engine.pipeline.judge.runner_link import OutputsTooLarge, RunnerLink
from engine.pipeline.protocol.types import TimerSpec
from engine.tasks.loader import load_task
from tests.paths import FIXTURES

GIB = 1 << 30
CUMSUM = [((32768, 32768), torch.float32)]   # 89_cumsum's output: 4 GiB


def _decoder(monkeypatch, expected):
    """The judge's decoder of signed output records, with the judge's GPU out of memory for any output."""
    def no_memory(meta, data, device="cpu"):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB")
    monkeypatch.setattr(wire, "tensor_from_bytes", no_memory)
    link = RunnerLink(TimerSpec("t.so", "t"))
    link.process = SimpleNamespace(key=b"k" * 32, arena=None)
    link.expected_outputs = expected
    return link.decoder(SimpleNamespace(fingerprint=lambda t, seed: 0))


def _output(shape, dtype="Float", k=0):
    body = {"i": 0, "k": k, "kind": "tensor", "dtype": dtype, "shape": list(shape), "strides": None, "nbytes": 0,
            "fp": "0"}
    return wire.Record(wire.OUTPUT, 5, 1, body, 0.0, bytearray())


def test_an_output_of_the_references_shape_and_dtype_is_the_judges_own_allocation(monkeypatch):
    decode = _decoder(monkeypatch, CUMSUM)
    with pytest.raises(torch.OutOfMemoryError):           # judge.py weighs it like any allocation of its own
        decode(_output((32768, 32768)), 0)


@pytest.mark.parametrize("shape, dtype, k, expected", [
    ((32768, 65536), "Float", 0, CUMSUM),                 # larger than the reference's
    ((32768, 32768), "Double", 0, CUMSUM),                # same shape, twice the bytes
    ((32768, 32768), "Float", 1, CUMSUM),                 # an output the reference does not have
    ((32768, 32768), "Float", 0, [None]),                 # the reference's output 0 is no tensor
    ((32768, 32768), "Float", 0, []),                     # no config's references known
], ids=["larger", "dtype", "extra-output", "not-a-tensor", "nothing-known"])
def test_any_other_output_the_judge_cannot_take_is_the_candidates_doing(monkeypatch, shape, dtype, k, expected):
    decode = _decoder(monkeypatch, expected)
    with pytest.raises(OutputsTooLarge, match="not the reference's"):
        decode(_output(shape, dtype, k), k)


def test_the_judges_own_lack_is_unmeasured_unless_the_candidate_holds_more_than_its_share():
    where = "the judge ran out of GPU memory during correctness of config seed0"
    share = 10 * GIB
    unmeasured, error = judge_memory_outcome(MemoryBlame(True, " (others hold it)", 30 * GIB), share, where)
    assert unmeasured == where + " (others hold it)" and error is None          # other users hold the GPU
    unmeasured, error = judge_memory_outcome(MemoryBlame(False, " (figures)", 9 * GIB), share, where)
    assert unmeasured == where + " (figures)" and error is None                 # too small a GPU for this config
    unmeasured, error = judge_memory_outcome(MemoryBlame(False, " (figures)", 11 * GIB), share, where)
    assert unmeasured is None and "held more than the 10240 MiB its runner needs" in error
    assert judge_memory_outcome(None, share, where) == (None, None)            # NVML cannot say: kbench's error


@pytest.mark.parametrize("candidate_gib, unmeasured", [(5, True), (6, False)])
def test_the_judges_entry_point_applies_the_rule_to_an_allocation_that_failed(monkeypatch, tmp_path, candidate_gib,
                                                                             unmeasured):
    """judge.py's end of an evaluation whose own allocation failed on config seed0, whose share is 3 GiB beside
    the slack: unmeasured with NVML's figures while the candidate's side holds no more, failed beyond."""
    judge = Judge(TimerSpec("t.so", "t"))
    judge.held = {"seed0": 3 * GIB}
    out = ResultFile(tmp_path / "result.json")
    out.progress("correctness", "seed0")

    def run():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB")
    monkeypatch.setattr(judge, "run", run)
    monkeypatch.setattr(judge, "close", lambda: None)
    monkeypatch.setattr(judge_main, "_cold", lambda path: (judge, SimpleNamespace(deadline_s=60), out, None))
    monkeypatch.setattr(judge_main, "memory_blame",
                        lambda: MemoryBlame(False, f" (the candidate's processes held {candidate_gib << 10} MiB)",
                                            candidate_gib * GIB))
    assert judge.candidate_share == 3 * GIB + CANDIDATE_SLACK == 5 * GIB
    judge_main.main(["request.json"])
    data = JudgeResult.from_json(json.loads((tmp_path / "result.json").read_text()))
    if unmeasured:
        assert data.unmeasured and "during correctness of config seed0" in data.unmeasured and not data.error
        assert f"held {candidate_gib << 10} MiB" in data.unmeasured
    else:
        assert not data.unmeasured and "held more than the 5120 MiB" in data.error


def test_a_configs_footprint_is_its_arguments_weights_and_outputs_each_storage_once():
    task = load_task(FIXTURES / "kernelbench" / "matmul_relu.py")
    rt = runtime_for(task, "forward")
    prep = prepare(rt, task.configs[0], 2, "cpu")
    plan_message(prep)
    x, w, b, y = 37 * 200, 129 * 200, 129, 37 * 129          # nn.Linear(200, 129) on x [37, 200]
    assert footprint(prep) == 4 * (x + w + b + y)
    assert reference_outputs(prep) == [((37, 129), torch.float32)]
    assert config_share(footprint(prep), 2) == 6 * footprint(prep)


def test_the_judge_holds_one_copy_of_each_variants_inputs_and_outputs_and_the_weights_on_the_device():
    """CPU accounting of prepare(): each variant's inputs once (the call plan's arguments are the inputs
    themselves, not a copy), its reference outputs once, the model's weights once on the device (their saved copy
    for restoring lives in host memory: on a CPU it is counted here too). Before: the plan's arguments were a
    second copy of every variant's inputs (KernelBench level 1 problem 23: 6 GiB each)."""
    task = load_task(FIXTURES / "kernelbench" / "matmul_relu.py")
    prep = prepare(runtime_for(task, "forward"), task.configs[0], 2, "cpu")
    plan_message(prep)
    x, w, y = 4 * 37 * 200, 4 * (129 * 200 + 129), 4 * 37 * 129
    assert held_bytes(prep, "cpu") == 2 * x + 2 * y + 2 * w     # the second w: the host copy ModelState keeps


@pytest.mark.parametrize("task_name, direction", [("layernorm_lastdim", "forward"), ("layernorm_lastdim", "backward"),
                                                  ("softmax", "forward"), ("llama_ffw", "forward"),
                                                  (FIXTURES / "robust_kbench" / "linear", "forward"),
                                                  (FIXTURES / "robust_kbench" / "linear", "backward"),
                                                  (FIXTURES / "kernelbench" / "conv_transpose_tanh.py", "forward")])
def test_every_format_holds_at_most_its_variants_footprints_and_weights(task_name, direction):
    task = load_task(task_name)
    rt = runtime_for(task, direction)
    cfg = min(task.configs, key=lambda c: sum(v for v in c.input_kwargs.values() if isinstance(v, int)) or 0)
    prep = prepare(rt, cfg, 2, "cpu")
    plan_message(prep)
    # a model per variant where the weights are arguments (native, robust-kbench), its host copy beside it; a
    # parameter the kernel is not given (a bias the backward does not take) is held but not in the footprint
    weights = sum(storages(getattr(rt, "_model", None) or getattr(rt, "model", None)).values())
    assert held_bytes(prep, "cpu") <= len(prep.variants) * (footprint(prep) + 2 * weights), \
        (held_bytes(prep, "cpu"), footprint(prep), weights)


def test_a_parked_variant_comes_back_one_at_a_time_and_goes_again(monkeypatch):
    """engine/pipeline/judge/parking.py with the `meta` device standing in for the GPU: a parked variant's inputs, call
    arguments and reference come back for the moment (one copy of a tensor shared by the state and the plan), the
    runtime is set to it meanwhile and holds the parked state afterwards, and the runner's message is the same."""
    from engine.pipeline.judge import parking
    monkeypatch.setattr(parking, "GPU", "meta")
    task = load_task(FIXTURES / "kernelbench" / "matmul_relu.py")
    rt = runtime_for(task, "forward")
    prep = prepare(rt, task.configs[0], 2, "cpu")
    before = plan_message(prep)[0]
    prep.variants = [parking.park(rt, v) for v in prep.variants]
    assert all(v.parked for v in prep.variants) and plan_message(prep)[0] == before
    with parking.loaded(rt, prep, 1) as here:
        x = rt.pristine()[0]
        assert x.is_meta and here.plan.args[0] is x and here.ref[0].is_meta
        assert here.ref[0].shape == prep.variants[1].ref[0].shape
    assert not rt.pristine()[0].is_meta and rt.pristine()[0] is prep.variants[1].plan.args[0]
    refs = parking.ParkedRefs(prep)
    assert len(refs) == 2 and refs[0][0].is_meta and [r[0].shape for r in refs] == [(37, 129), (37, 129)]


def test_a_cold_judges_task_setup_is_timed_after_its_start(monkeypatch, tmp_path):
    """`judge.task_setup` counts from the end of `judge.judge_start`: both phases used to read the start's 3 s
    (kbench eval's time line showed a 3 s task setup that was the start counted twice)."""
    import time
    req = SimpleNamespace(timer=TimerSpec("t.so", "t"), result_path=str(tmp_path / "result.json"), deadline_s=60)
    monkeypatch.setattr(judge_main, "JudgeRequest", SimpleNamespace(from_json=lambda obj: req))

    def attach(self, r, out):
        self.req, self.out, self.t0 = r, out, time.monotonic()
    monkeypatch.setattr(Judge, "attach", attach)
    monkeypatch.setattr(judge_main, "_warm", lambda judge, spare=False: time.sleep(0.3))
    (tmp_path / "request.json").write_text("{}")
    judge, _, out, _ = judge_main._cold(tmp_path / "request.json")
    assert out.data.seconds["judge_start"] >= 0.3
    assert judge.spent("task_setup", judge.t0) and out.data.seconds["task_setup"] < 0.2
