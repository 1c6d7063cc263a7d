"""The typed control messages (engine/pipeline/protocol/messages.py): their wire shapes, the strict parse of what the
runner sends, and the judge's end taking a forged or garbled reply as it takes any reply it did not expect."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.jail import landlock
from engine.pipeline.protocol import messages as msg
from engine.pipeline.protocol import wire
from engine.pipeline.judge.runner_link import RunnerLink
from engine.pipeline.judge.runner_process import RunnerProcess
from engine.config.sections import TimingParams
from engine.gpu_wait import NO_GPU
from engine.pipeline.protocol.types import CandidateSpec, TimerSpec
from tests.kbench_procs import runner_without_gpu
from tests.paths import REPO

REQUESTS = [
    msg.Setup(jail={"readonly": ["/x"]}, timer_so="/ro/timer.so", timer_module="kb_timer", pin_arena=True),
    msg.Load(module_name="kb_x", py_path="/ro/x.py"),
    msg.Load(module_name="kb_x", so_path="/ro/x.so", entry="forward"),
    msg.Config(cid="bench", kind="fn", entry="forward", args={"tuple": [{"t": 0}, 3, None]}, variants=2,
               per_variant=1),
    msg.Config(cid="bench", kind="modelnew", entry="forward", args={"tuple": []}, variants=1, per_variant=0,
               model={"seed": 1, "init": {"tuple": []}, "state": {"w": 0}, "dtype": None}),
    msg.Job(job=3, cid="bench", mode="check", schedule=(0, 1, 0, 1), probe_inputs=True, settle_ms=20.0),
    msg.Job(job=4, cid="bench", mode="time", timing=TimingParams(warmup=5, min_iters=20, max_iters=2000, budget_s=0.4,
                                                                 flush_l2=False, checks=3)),
    msg.Drop(cid="bench"), msg.Ping(), msg.Exit(),
]
REPLIES = [
    msg.Jailed(report={"filesystem": True, "missing": []}), msg.NoGpu(), msg.Ready(device={"gpu": "H100"}, pid=7),
    msg.Loaded(), msg.Configured(cid="bench"), msg.JobDone(job=3, status="ok"),
    msg.JobDone(job=3, status="ok", fatal=True, message="CUDA error: an illegal memory access"),
    msg.Error(message="ValueError: no", trace="Traceback ..."), msg.Error(message="runner: died", fatal=True),
    msg.Dropped(), msg.Pong(),
]


def _through_the_channel(m: Any) -> dict[str, Any]:
    """A message as the other side reads it: JSON, with the tensor list wire.Channel.send adds."""
    return json.loads(json.dumps({**m.to_wire(), "tensors": []}))


@pytest.mark.parametrize("m", REQUESTS, ids=lambda m: m.KIND)
def test_every_request_round_trips(m):
    assert msg.parse_request(_through_the_channel(m)) == m


@pytest.mark.parametrize("m", REPLIES, ids=lambda m: m.KIND)
def test_every_reply_round_trips(m):
    assert msg.parse_reply(_through_the_channel(m)) == m


def test_the_wire_shapes_are_the_ones_the_channel_always_carried():
    assert msg.Error(message="x").to_wire() == {"type": "error", "message": "x"}
    assert msg.JobDone(job=1, status="ok").to_wire() == {"type": "job_done", "job": 1, "status": "ok"}
    assert msg.JobDone(job=1, status="s", fatal=True, message="m").to_wire() == \
        {"type": "job_done", "job": 1, "status": "s", "fatal": True, "message": "m"}
    assert msg.Load(module_name="m", py_path="/p").to_wire() == {"type": "load", "module_name": "m", "py_path": "/p"}
    assert msg.Ready(device={"gpu": "g"}, pid=2).to_wire() == {"type": "ready", "device": {"gpu": "g"}, "pid": 2}
    assert msg.Configured(cid="c").to_wire() == {"type": "configured", "cid": "c"}
    assert msg.Ping().to_wire() == {"type": "ping"}
    # a job the runner got before the types, with its parameters left out, still means what it meant
    assert msg.parse_request({"type": "job", "job": 1, "cid": "none", "mode": "check"}) == \
        msg.Job(job=1, cid="none", mode="check")


FORGED = [
    ([], "not a JSON object but list"),
    ("loaded", "not a JSON object but str"),
    ({}, "unknown type None"),
    ({"type": "owned"}, "unknown type 'owned'"),
    ({"type": 5}, "unknown type 5"),
    ({"type": "setup", "jail": {}, "timer_so": "", "timer_module": ""}, "unknown type 'setup'"),   # a request
    ({"type": "x" * 10_000}, "unknown type 'xxxx"),
    ({"type": "jailed"}, "`jailed` message: missing field(s) report"),
    ({"type": "jailed", "report": []}, "`jailed` message: field `report` must be dict, not list"),
    ({"type": "jailed", "report": {}, "extra": 1}, "`jailed` message: unknown field(s) 'extra'"),
    ({"type": "ready", "device": {"gpu": 1}, "pid": 2}, "`ready` message: field `device`['gpu'] must be str"),
    ({"type": "ready", "device": {}, "pid": "2"}, "`ready` message: field `pid` must be int, not str"),
    ({"type": "configured"}, "`configured` message: missing field(s) cid"),
    ({"type": "configured", "cid": None}, "`configured` message: field `cid` must be str, not NoneType"),
    ({"type": "job_done", "job": True, "status": "ok"}, "`job_done` message: field `job` must be int, not bool"),
    ({"type": "job_done", "job": 1.0, "status": "ok"}, "`job_done` message: field `job` must be int, not float"),
    ({"type": "job_done", "job": 1, "status": "ok", "fatal": 1}, "field `fatal` must be bool, not int"),
    ({"type": "job_done", "job": 1, "status": "ok", "fatal": True}, "`fatal` without a `message`"),
    ({"type": "error"}, "`error` message: missing field(s) message"),
    ({"type": "error", "message": {"a": 1}}, "`error` message: field `message` must be str, not dict"),
    ({"type": "loaded", "tensors": [{"nbytes": 8}]}, "`loaded` message: announces tensors"),
    ({"type": "loaded", "tensors": 0}, "`loaded` message: announces tensors"),
]


@pytest.mark.parametrize("obj, words", FORGED, ids=[w for _, w in FORGED])
def test_a_forged_or_garbled_reply_is_refused_with_the_message_named(obj, words):
    with pytest.raises(msg.MessageError) as err:
        msg.parse_reply(obj)
    assert words in str(err.value)
    assert len(str(err.value)) < 300        # a forged value is quoted, never in full


def test_a_reply_kind_is_no_request():
    with pytest.raises(msg.MessageError, match="request of unknown type 'pong'"):
        msg.parse_request({"type": "pong"})
    with pytest.raises(msg.MessageError, match="exactly one of `py_path` and `so_path`"):
        msg.parse_as({"type": "load", "module_name": "m"}, msg.Load)
    with pytest.raises(msg.MessageError, match="with a model"):
        msg.Config(cid="c", kind="fn", entry="f", args=None, variants=1, per_variant=0, model={})


def test_what_the_judge_says_of_an_answer_it_did_not_await():
    assert msg.explain(msg.Error(message="ImportError: x")) == "ImportError: x"
    assert msg.explain(msg.Pong()) == "an unexpected `pong` reply"
    assert msg.explain(msg.Garbled("`jailed` message: missing field(s) report")) == \
        "a malformed reply (`jailed` message: missing field(s) report)"
    assert len(msg.explain(msg.Error(message="y" * 10_000))) < msg.CLIP + 10
    assert msg.fatal_reason(msg.JobDone(job=1, status="s", fatal=True, message="CUDA error: x")) == "CUDA error: x"
    assert msg.fatal_reason(msg.Error(message="runner: gone", fatal=True)) == "runner: gone"
    assert msg.fatal_reason(msg.JobDone(job=1, status="s")) is None
    assert msg.fatal_reason(msg.Garbled("no")) is None and msg.fatal_reason(None) is None


# -- the judge's end, on a socket the test writes as a forging runner would ----------------------------------------
@dataclass
class _Exited:
    """Stands for the runner's Popen: it has exited."""
    returncode: int = 0

    def poll(self) -> int:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode


@pytest.fixture
def forger(tmp_path):
    judge_end, runner_end = socket.socketpair()
    rp = RunnerProcess(_Exited(), wire.Channel(judge_end), b"", tmp_path)   # type: ignore[arg-type]
    link = RunnerLink(TimerSpec("/nonexistent", "none"))
    link.process = rp
    yield link, runner_end
    judge_end.close()
    runner_end.close()


def _frame(sock: socket.socket, body: bytes) -> None:
    sock.sendall(struct.pack("<I", len(body)) + body)


def _reply(sock: socket.socket, obj: Any) -> None:
    _frame(sock, json.dumps({**obj, "tensors": []}).encode())


def test_a_garbled_reply_is_an_unexpected_answer_and_the_channel_stays_in_step(forger):
    link, runner = forger
    for body in (b"\xff\xfe not JSON", b"[1, 2]", b"[" * 100_000, json.dumps({"type": "loaded", "x": 1}).encode()):
        _frame(runner, body)
    _reply(runner, {"type": "pong"})
    got = [link.process.answer(5) for _ in range(5)]
    assert all(isinstance(a, msg.Garbled) for a in got[:4]), got
    assert "not JSON" in got[0].why and "not a JSON object but list" in got[1].why
    assert "not JSON (RecursionError)" in got[2].why and "unknown field(s) 'x'" in got[3].why
    assert got[4] == msg.Pong()


def test_forged_replies_become_the_failure_of_the_step_that_awaited_them(forger):
    link, runner = forger
    deadline = time.monotonic() + 10
    _reply(runner, {"type": "jailed"})                                        # no report
    assert link.up(deadline) == "the runner did not start: a malformed reply (`jailed` message: missing " \
                                "field(s) report)"
    _reply(runner, {"type": "jailed", "report": {}})
    _reply(runner, {"type": "ready", "device": {"gpu": "H100"}, "pid": "1"})   # a pid that is a string
    assert link.up(deadline).startswith("the runner did not start: a malformed reply (`ready` message: field `pid`")
    _reply(runner, {"type": "jailed", "report": {}})
    _reply(runner, {"type": "no_gpu"})
    assert link.up(deadline) == NO_GPU
    config = msg.Config(cid="bench", kind="fn", entry="forward", args=None, variants=1, per_variant=0)
    _reply(runner, {"type": "configured", "cid": "other"})                   # another config's answer
    answer = link.configure(config, [], deadline)
    assert isinstance(answer, msg.Garbled) and "names config 'other', not 'bench'" in answer.why
    _reply(runner, {"type": "configured", "cid": "bench", "ok": True})
    assert isinstance(link.configure(config, [], deadline), msg.Garbled)
    _reply(runner, {"type": "configured", "cid": "bench"})
    assert link.configure(config, [], deadline) == msg.Configured(cid="bench")
    _reply(runner, {"type": "dropped", "freed": "everything"})               # a drop's answer only has to come
    link.drop("bench", deadline)
    sent = [wire.Channel(runner).recv(timeout=5)[0] for _ in range(4)]
    assert [h["type"] for h in sent] == ["config", "config", "config", "drop"]
    assert msg.parse_request(sent[0]) == config


# -- the real runner, whose candidate writes on the control channel ------------------------------------------------
FORGER = '''
import os, stat, struct
for fd in range(3, 64):
    try:
        if stat.S_ISSOCK(os.fstat(fd).st_mode):
            os.write(fd, struct.pack("<I", len(BODY)) + BODY)
    except OSError:
        pass
def forward(*args):
    return args[0]
'''


@pytest.mark.skipif(landlock.abi_version() < 1, reason="this kernel has no Landlock")
@pytest.mark.skipif(torch.cuda.is_available(), reason="the runner's no-GPU path: a stand-in timer cannot load")
@pytest.mark.parametrize("body, words", [
    (b"garbage", "a control header that is not JSON"),
    (json.dumps({"type": "loaded", "owned": True}).encode(), "`loaded` message: unknown field(s) 'owned'"),
])
def test_a_candidate_that_forges_a_reply_fails_to_load_and_nothing_raises(tmp_path, body, words):
    src = tmp_path / "forger.py"
    src.write_text(f"BODY = {body!r}\n" + FORGER)
    with runner_without_gpu(tmp_path) as (link, deadline):
        why = link.load(CandidateSpec("native", "kb_forger", py_path=str(src)), "forward", deadline)
        assert why is not None and why.startswith(f"the candidate failed to load: a malformed reply ({words}"), why
        assert link.process is not None
        assert link.process.answer(30) == msg.Loaded()        # the runner's own answer, still in step


def test_the_messages_and_the_runner_import_no_third_party_package_before_the_jail():
    code = textwrap.dedent("""
        import sys
        for name in ("torch", "numpy", "pydantic", "pydantic_core"):
            sys.modules[name] = None          # an import of it raises ImportError
        import engine.pipeline.protocol.messages, engine.pipeline.runner
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(REPO), env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_a_message_without_tensors_is_sent_before_torch_is_loaded():
    """The judge's setup message and the runner's jail report carry no tensors: sending them must not import torch
    (about a second), or the runner waits for its setup while the judge imports torch and the judge waits for the
    jail report while the runner does, and the standby judge comes up one torch import later (1.2 s on the CPU box,
    judge.standby_up 2.97 s -> 1.79 s). Run in a fresh interpreter, which has not loaded torch."""
    code = ("import socket, sys\n"
            "from engine.pipeline.protocol.wire import Channel\n"
            "a, b = socket.socketpair()\n"
            "Channel(a).send({'kind': 'setup', 'n': 1})\n"
            "header, blobs = Channel(b).recv()\n"
            "print(header['n'], blobs, 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "[]", "False"], out.stdout
