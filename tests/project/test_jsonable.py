"""engine.jsonable: dataclasses to JSON-able data and back through pydantic, for the types whose JSON mirrors their
fields. What is written stays byte-for-byte what the hand-written to_json methods wrote (GOLDEN holds their output
for one instance of each, taken before the change; fields added since are appended where they were added:
SessionBaseline.measured_at, BaselineOrigin.measured_at, JudgeRequest.cached_baselines and .numerics), and what is read
back is
the same instance."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from engine import jsonable
from engine.errors import DataError, KbenchError
from engine.evolve.outcome import EvalOutcome
from engine.llm.accounting import CallRecord, Usage
from engine.harness.timing import TimingStats
from engine.jail import JailReport
from engine.pipeline.protocol.result import (BaselineOrigin, DeviceInfo, JudgeResult, NullLoop, Progress, Recheck,
                                          TimingRow)
from engine.config.sections import TimingParams
from engine.pipeline.protocol.types import (CandidateSpec, CorrectnessResult, IntegrityResult, JudgeRequest,
                                            SessionBaseline, TimerSpec)
from engine.profile.summarise import KernelProfile, ProfileSummary
from engine.tasks.model import Cost, DirectionSpec, Task, TaskConfig, Tolerance
from engine.verdict import Status, Verdict
from engine.workspace.note_entries import ConfigTiming

# as the note writer (engine.workspace.records.entry_line) and the judge's result file write them
NOTE = {"ensure_ascii": False, "separators": (",", ":"), "default": str}


def samples():
    v = Verdict("correctness", Status.SUSPICIOUS, "max error 3e-2 — near the bound",
                {"max_abs_err": math.nan, "max_rel_err": math.inf, "shape": (4, 8), "trials": 2, "ok": True,
                 "configs": {"small": {"ms": 0.5, "seeds": [1, 2]}}, "note": None})
    u = Usage(1200, 340, 56, 7800)
    cr = CallRecord("claude-opus-5-5", u, 0.01234, "p-1234", "mutate", 2, 1700000000.25)
    cr2 = CallRecord("claude-haiku-4-5", Usage(), 0.0, None, "", 1, 1700000001.0)
    tc = TaskConfig("bench", {"n": 4096, "eps": 1e-5}, {"batch": 8}, seed=3, init="uniform",
                    cost={"forward": Cost(2.0e9, 6.5e7), "backward": Cost(4.0e9, 1.3e8)},
                    tags=("robust-kbench", "single", "forward"))
    task = Task("layernorm", Path("/tasks/layernorm"), "native", "LayerNorm over the last dim", ("norm",), "float32",
                {"forward": DirectionSpec("forward", "forward(x: f32[B,N]) -> f32[B,N]", Tolerance(1e-5, 1e-3),
                                          Path("/tasks/layernorm/reference.py"), 0.0, (1,))},
                (tc, TaskConfig("tiny", {"n": 8}, {}, )), "engineering", ("a note",))
    req = JudgeRequest(task=task.to_json(), direction="forward",
                       candidate=CandidateSpec("native", "kb_abc", so_path="/x/kb_abc.so"),
                       timer=TimerSpec("/x/timer.so", "kb_timer"), result_path="/tmp/r.json",
                       configs=["bench", "tiny"], timing_configs=None, trials=3, timing=True,
                       baselines=("eager",), timing_params=TimingParams(warmup=3, budget_s=0.25, flush_l2=False),
                       integrity=False, deadline_s=120.5,
                       session_baselines={"bench": SessionBaseline(eager=TimingStats(1.5, 0.02, 1.5, 1.4, 80, 1.5),
                                                                   compile_error="no inductor")}, gpu=1)
    stats = TimingStats(0.31, 0.01, 0.32, 0.3, 200, 0.31)
    res = JudgeResult(finished=True, progress=Progress("timing", "bench", 1700000000.5),
                      device=DeviceInfo(torch="2.11.0", cuda="13.0", gpu="H100", capability="9.0", sms=132),
                      jail=JailReport(landlock_abi=4, filesystem=True, missing=["seccomp: not here"]),
                      correctness={"bench": CorrectnessResult(False, "trial 0: wrong", 2, math.inf, None, 0.5)},
                      timing={"bench": TimingRow(stats, hidden_work=True, witness={"clock_ms": 0.62}, checked=[3, 17],
                                                 null=NullLoop(0.004, None), baselines=BaselineOrigin("session",
                                                 Recheck("eager", 0.61, 0.6)), eager=stats, speedup_eager=1.0),
                              "tiny": TimingRow(error="raised at call 2")},
                      integrity={"bench": IntegrityResult(True, checks=["clock"]),
                                 "bench@timing": IntegrityResult(False, "timer-forgery", "timer-forgery: x")},
                      error=None, seconds={"reference": 1.25, "timing": 3.5}, traces={"x": "Traceback..."}, warm=True,
                      baseline_drift={"bench": Recheck("eager", 1.7, 1.5)}, unmeasured="the judge ran out of GPU memory",
                      gpu_shared="pid 4242 at up to 97 % SM")
    kp = KernelProfile("gemm_kernel", 12.5, 71.25, 40.0, 2100.0, 12.3, 96.0, 49152.0, 45.5, 50.0, "(128, 1, 1)",
                       "(64, 64, 1)", [("long_scoreboard", 1.25), ("wait", 0.5)])
    kp2 = KernelProfile("reduce", None, None, None, None, None, None, None, None, None)
    ps = ProfileSummary("memory", [kp, kp2], "bench", "NVIDIA H100", 0.82, 31.5, 0.6,
                        [{"name": "aten::mm", "device_us": 10.5, "calls": 2}], [], "")
    ps2 = ProfileSummary("unknown", [], ncu_skipped="ncu not permitted (ERR_NVGPUCTRPERM)")
    out = EvalOutcome([v, Verdict("compile", Status.PASS, "", {"steps": {"nvcc": 4.5}})],
                      [ConfigTiming("bench", 0.31, 0.01, 0.62, 0.5), ConfigTiming("tiny", 0.02)], 2.0, 1.24,
                      {"gpu": "NVIDIA H100", "driver": "560.1"}, 14.25, 9.5, 4.75, 0, {"ray": {"gpu": {"host": "n1"}}},
                      "", 2)
    out2 = EvalOutcome([], infra_error="no CUDA GPU is visible to the evaluator")
    return {"verdict": v, "usage": u, "call_record": cr, "call_record_empty": cr2, "task_config": tc, "task": task,
            "judge_request": req, "judge_result": res, "profile_summary": ps, "profile_summary_skipped": ps2,
            "eval_outcome": out, "eval_outcome_infra": out2}


# json.dumps(x.to_json(), **NOTE) of samples(), by the to_json methods before engine.jsonable
GOLDEN = {
    'verdict':
        '{"stage":"correctness","status":"suspicious","reason":"max error 3e-2 — near the bound","data":{"max_abs_err":NaN,"max_rel_err":Infinity,"shape":[4,8],"trials":2,"ok":true,"configs":{"small":{"ms":0.5,"seeds":[1,2]}},"note":null}}',
    'usage':
        '{"input_tokens":1200,"output_tokens":340,"cache_write_tokens":56,"cache_read_tokens":7800}',
    'call_record':
        '{"model":"claude-opus-5-5","usage":{"input_tokens":1200,"output_tokens":340,"cache_write_tokens":56,"cache_read_tokens":7800},"cost_usd":0.01234,"key":"p-1234","purpose":"mutate","attempts":2,"at":1700000000.25}',
    'call_record_empty':
        '{"model":"claude-haiku-4-5","usage":{"input_tokens":0,"output_tokens":0,"cache_write_tokens":0,"cache_read_tokens":0},"cost_usd":0.0,"key":null,"purpose":"","attempts":1,"at":1700000001.0}',
    'task_config':
        '{"name":"bench","model_kwargs":{"n":4096,"eps":1e-05},"input_kwargs":{"batch":8},"seed":3,"init":"uniform","cost":{"forward":{"flops":2000000000.0,"bytes":65000000.0},"backward":{"flops":4000000000.0,"bytes":130000000.0}},"tags":["robust-kbench","single","forward"]}',
    'task':
        '{"name":"layernorm","root":"/tasks/layernorm","format":"native","description":"LayerNorm over the last dim","tags":["norm"],"dtype":"float32","directions":{"forward":{"signature":"forward(x: f32[B,N]) -> f32[B,N]","atol":1e-05,"rtol":0.001,"reference_path":"/tasks/layernorm/reference.py","max_mismatch_fraction":0.0,"no_grad":[1]}},"configs":[{"name":"bench","model_kwargs":{"n":4096,"eps":1e-05},"input_kwargs":{"batch":8},"seed":3,"init":"uniform","cost":{"forward":{"flops":2000000000.0,"bytes":65000000.0},"backward":{"flops":4000000000.0,"bytes":130000000.0}},"tags":["robust-kbench","single","forward"]},{"name":"tiny","model_kwargs":{"n":8},"input_kwargs":{},"seed":0,"init":"normal","cost":{},"tags":[]}],"library_policy":"engineering","notes":["a note"]}',
    'judge_request':
        '{"task":{"name":"layernorm","root":"/tasks/layernorm","format":"native","description":"LayerNorm over the last dim","tags":["norm"],"dtype":"float32","directions":{"forward":{"signature":"forward(x: f32[B,N]) -> f32[B,N]","atol":1e-05,"rtol":0.001,"reference_path":"/tasks/layernorm/reference.py","max_mismatch_fraction":0.0,"no_grad":[1]}},"configs":[{"name":"bench","model_kwargs":{"n":4096,"eps":1e-05},"input_kwargs":{"batch":8},"seed":3,"init":"uniform","cost":{"forward":{"flops":2000000000.0,"bytes":65000000.0},"backward":{"flops":4000000000.0,"bytes":130000000.0}},"tags":["robust-kbench","single","forward"]},{"name":"tiny","model_kwargs":{"n":8},"input_kwargs":{},"seed":0,"init":"normal","cost":{},"tags":[]}],"library_policy":"engineering","notes":["a note"]},"direction":"forward","candidate":{"format":"native","module_name":"kb_abc","so_path":"/x/kb_abc.so","py_path":null,"torch_extensions":null},"timer":{"so_path":"/x/timer.so","module_name":"kb_timer"},"result_path":"/tmp/r.json","configs":["bench","tiny"],"timing_configs":null,"trials":3,"timing":true,"baselines":["eager"],"timing_params":{"warmup":3,"min_iters":20,"max_iters":2000,"budget_s":0.25,"flush_l2":false,"checks":3},"integrity":false,"deadline_s":120.5,"session_baselines":{"bench":{"eager":{"median_ms":1.5,"iqr_ms":0.02,"mean_ms":1.5,"min_ms":1.4,"n":80,"all_streams_ms":1.5},"compile":null,"compile_error":"no inductor","measured_at":null}},"gpu":1,"cached_baselines":null,"numerics":null,"upstream_draws":false,"float64_opinion":true,"gpu_keep":0.125}',
    'judge_result':
        '{"finished":true,"progress":{"stage":"timing","config":"bench","t":1700000000.5},"device":{"torch":"2.11.0","cuda":"13.0","gpu":"H100","capability":"9.0","sms":132,"memory_gb":null,"l2_mb":null,"driver":null,"uuid":null},"numerics":null,"jail":{"landlock_abi":4,"filesystem":true,"tcp":false,"scoped":false,"network_namespace":"","seccomp":"","identity":"","dumpable":true,"missing":["seccomp: not here"],"bounded":[],"unbounded":[]},"correctness":{"bench":{"ok":false,"reason":"trial 0: wrong","trials":2,"max_abs_err":Infinity,"max_rel_err":null,"seconds":0.5}},"timing":{"bench":{"candidate":{"median_ms":0.31,"iqr_ms":0.01,"mean_ms":0.32,"min_ms":0.3,"n":200,"all_streams_ms":0.31},"error":null,"hidden_work":true,"witness":{"clock_ms":0.62},"checked":[3,17],"null":{"median_ms":0.004,"gap_ms":null},"baselines":{"source":"session","recheck":{"baseline":"eager","now_ms":0.61,"session_ms":0.6},"measured_at":null},"eager":{"median_ms":0.31,"iqr_ms":0.01,"mean_ms":0.32,"min_ms":0.3,"n":200,"all_streams_ms":0.31},"compile":null,"compile_error":null,"speedup_eager":1.0,"speedup_compile":null},"tiny":{"candidate":null,"error":"raised at call 2","hidden_work":false,"witness":{},"checked":[],"null":null,"baselines":null,"eager":null,"compile":null,"compile_error":null,"speedup_eager":null,"speedup_compile":null}},"integrity":{"bench":{"ok":true,"hack":null,"reason":"","checks":["clock"]},"bench@timing":{"ok":false,"hack":"timer-forgery","reason":"timer-forgery: x","checks":[]}},"error":null,"seconds":{"reference":1.25,"timing":3.5},"traces":{"x":"Traceback..."},"warm":true,"baseline_drift":{"bench":{"baseline":"eager","now_ms":1.7,"session_ms":1.5}},"unmeasured":"the judge ran out of GPU memory","gpu_shared":"pid 4242 at up to 97 % SM","memory":{},"fresh":{},"mutated":{},"cost":{}}',
    'profile_summary':
        '{"bottleneck":"memory","kernels":[{"name":"gemm_kernel","duration_us":12.5,"memory_pct":71.25,"compute_pct":40.0,"dram_gbps":2100.0,"tflops":12.3,"registers_per_thread":96.0,"shared_mem_per_block":49152.0,"achieved_occupancy_pct":45.5,"theoretical_occupancy_pct":50.0,"block":"(128, 1, 1)","grid":"(64, 64, 1)","stalls":[["long_scoreboard",1.25],["wait",0.5]]},{"name":"reduce","duration_us":null,"memory_pct":null,"compute_pct":null,"dram_gbps":null,"tflops":null,"registers_per_thread":null,"shared_mem_per_block":null,"achieved_occupancy_pct":null,"theoretical_occupancy_pct":null,"block":"","grid":"","stalls":[]}],"config":"bench","gpu":"NVIDIA H100","dram_fraction":0.82,"model_tflops":31.5,"compute_fraction":0.6,"torch_ops":[{"name":"aten::mm","device_us":10.5,"calls":2}],"reference_ops":[],"ncu_skipped":""}',
    'profile_summary_skipped':
        '{"bottleneck":"unknown","kernels":[],"config":"","gpu":"","dram_fraction":null,"model_tflops":null,"compute_fraction":null,"torch_ops":[],"reference_ops":[],"ncu_skipped":"ncu not permitted (ERR_NVGPUCTRPERM)"}',
    'eval_outcome':
        '{"verdicts":[{"stage":"correctness","status":"suspicious","reason":"max error 3e-2 — near the bound","data":{"max_abs_err":NaN,"max_rel_err":Infinity,"shape":[4,8],"trials":2,"ok":true,"configs":{"small":{"ms":0.5,"seeds":[1,2]}},"note":null}},{"stage":"compile","status":"pass","reason":"","data":{"steps":{"nvcc":4.5}}}],"configs":[{"config":"bench","ms":0.31,"iqr_ms":0.01,"eager_ms":0.62,"compile_ms":0.5},{"config":"tiny","ms":0.02,"iqr_ms":null,"eager_ms":null,"compile_ms":null}],"speedup_eager":2.0,"speedup_compile":1.24,"device":{"gpu":"NVIDIA H100","driver":"560.1"},"seconds":14.25,"build_s":9.5,"gpu_s":4.75,"gpu":0,"data":{"ray":{"gpu":{"host":"n1"}}},"infra_error":"","attempts":2}',
    'eval_outcome_infra':
        '{"verdicts":[],"configs":[],"speedup_eager":null,"speedup_compile":null,"device":{},"seconds":0.0,"build_s":null,"gpu_s":null,"gpu":null,"data":{},"infra_error":"no CUDA GPU is visible to the evaluator","attempts":1}',
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_the_json_written_is_unchanged(name):
    assert json.dumps(samples()[name].to_json(), **NOTE) == GOLDEN[name]


@pytest.mark.parametrize("name", sorted(set(GOLDEN) - {"call_record", "call_record_empty", "task"}))
def test_what_is_written_reads_back_as_the_same_instance(name):
    x = samples()[name]
    back = type(x).from_json(json.loads(json.dumps(x.to_json(), **NOTE)))
    assert type(back) is type(x)
    assert json.dumps(back.to_json(), **NOTE) == GOLDEN[name]    # NaN != NaN: compare what they write
    if "nan" not in repr(x):
        assert back == x


def test_read_back_values_have_their_field_types():
    x = samples()
    v = Verdict.from_json(json.loads(GOLDEN["verdict"]))
    assert v.status is Status.SUSPICIOUS and math.isnan(v.data["max_abs_err"]) and math.isinf(v.data["max_rel_err"])
    tc = TaskConfig.from_json(json.loads(GOLDEN["task_config"]))
    assert tc.tags == ("robust-kbench", "single", "forward") and tc.cost["forward"] == Cost(2.0e9, 6.5e7)
    req = JudgeRequest.from_json(json.loads(GOLDEN["judge_request"]))
    assert req.baselines == ("eager",) and isinstance(req.timing_params, TimingParams) and req.candidate.so_path
    assert isinstance(req.session_baselines["bench"].eager, TimingStats)
    res = JudgeResult.from_json(json.loads(GOLDEN["judge_result"]))
    assert isinstance(res.progress, Progress) and isinstance(res.jail, JailReport) and res.jail.filesystem
    assert isinstance(res.correctness["bench"], CorrectnessResult) and math.isinf(res.correctness["bench"].max_abs_err)
    row = res.timing["bench"]
    assert isinstance(row.candidate, TimingStats) and row.baselines.recheck == Recheck("eager", 0.61, 0.6)
    assert res.timing["tiny"].candidate is None and res.integrity["bench@timing"].hack == "timer-forgery"
    ps = ProfileSummary.from_json(json.loads(GOLDEN["profile_summary"]))
    assert ps.kernels[0].stalls == [("long_scoreboard", 1.25), ("wait", 0.5)]
    out = EvalOutcome.from_json(json.loads(GOLDEN["eval_outcome"]))
    assert out.configs == x["eval_outcome"].configs and isinstance(out.configs[0], ConfigTiming)
    assert Task.from_json(json.loads(GOLDEN["task"])) == x["task"]
    assert EvalOutcome([], speedup_eager=math.inf).to_json()["speedup_eager"] == math.inf   # a float field too


def test_fields_left_out_take_their_defaults_and_unknown_keys_are_ignored():
    assert Verdict.from_json({"stage": "compile", "status": "pass"}) == Verdict("compile", Status.PASS)
    assert Usage.from_json({"input_tokens": 5, "cache_read_tokens": "7", "later_field": 1}) == Usage(5, 0, 0, 7)
    assert JudgeResult.from_json(None) == JudgeResult()
    # the timing loop's parameters are the one exception: a key the helper would not take is refused
    # (tests/pipeline/test_timing_params.py)
    assert jsonable.load(TimingParams, {"warmup": 2}) == TimingParams(warmup=2)


def test_a_malformed_record_names_what_was_read_the_field_and_what_was_found():
    with pytest.raises(DataError) as err:
        EvalOutcome.from_json({"verdicts": [{"stage": "timing", "status": "great"}, {"status": "pass"}],
                               "configs": [{"config": "bench", "ms": "fast"}], "seconds": 1.5})
    msg = str(err.value)
    assert msg.startswith("an evaluation's outcome: not a valid EvalOutcome: ")
    assert "verdicts[0].status: input should be 'pass', 'fail', 'skipped' or 'suspicious', got 'great'" in msg
    assert "verdicts[1].stage: field required" in msg
    assert "configs[0].ms: input should be a valid number" in msg and "got 'fast'" in msg
    assert isinstance(err.value, KbenchError) and isinstance(err.value, ValueError)
    with pytest.raises(DataError, match=r"^notes of c1: expected a JSON object \(Verdict\), got \[1, 2\]\.$"):
        Verdict.from_json([1, 2], "notes of c1")
    with pytest.raises(DataError, match=r"the judge's request: not a valid JudgeRequest: candidate: field required"):
        JudgeRequest.from_json({"task": {}, "direction": "forward", "timer": {"so_path": "t", "module_name": "m"},
                                "result_path": "r"})


def test_a_value_pydantic_does_not_know_is_written_as_its_str():
    class Odd:
        def __str__(self):
            return "odd!"
    v = Verdict("static", Status.PASS, "", {"thing": Odd(), "path": Path("/a/b")})
    old = {"stage": "static", "status": "pass", "reason": "", "data": {"thing": Odd(), "path": Path("/a/b")}}
    assert json.dumps(v.to_json(), **NOTE) == json.dumps(old, **NOTE)     # as json.dumps(default=str) wrote it



def test_load_trusted_reads_what_kbench_wrote_without_pydantic():
    """The jailed children read their requests with it: pydantic cannot be imported in the jail."""
    import subprocess
    import sys
    code = ("import sys; from engine.harness.kernelbench.child_types import CompileRequest; "
            "r = CompileRequest.from_json({'py_path': 'a.py', 'module_name': 'kb_m', 'later_key': 1}); "
            "print(r.py_path, r.module_name, r.result_path == '', 'pydantic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == ["a.py", "kb_m", "True", "False"], out.stderr
