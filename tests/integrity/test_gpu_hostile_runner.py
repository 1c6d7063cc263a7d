"""The runner (candidate code on the GPU) under the hostile files and resource attacks the compile steps meet on
CPU (tests/jail/test_step_limits.py): root-only files, a fork storm past its task limit, host memory past its
cgroup, a file past its size limit, a folder past its quota, a `setsid` daemon, an output flood. Each candidate
is scaled_swish computed with torch, its attack in `forward` (so only the runner, with the GPU, runs it; the
compile stage's import does not), the static gate overridden so that the judge and the jail are what show, and
tight limits through KBENCH_JAIL_LIMITS.

    python -m pytest -q -m gpu tests/integrity/test_gpu_hostile_runner.py -rA -s    # one HOSTILE-ROW per case
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.candidates import Candidate
from engine.jail.cgroups import support
from engine.pipeline.eval_types import EvalOptions
from engine.pipeline.evaluate import evaluate
from engine.tasks.loader import load_task
from engine.verdict import Status
from tests import hostile_python as attack
from tests.paths import FIXTURES

pytestmark = [pytest.mark.gpu]

SWISH = FIXTURES / "kernelbench" / "scaled_swish.py"
TEMPLATE = '''import os, sys, time
import torch
import torch.nn as nn
DONE = []


def attack():
{body}


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not DONE:
            DONE.append(1)
            attack()
        return self.scale * x * torch.sigmoid(x)
'''


def _eval(monkeypatch, name: str, body: str, limits: str = "processes=512,file=256M,scratch=512M,output=1M"):
    monkeypatch.setenv("KBENCH_JAIL_LIMITS", limits)
    src = TEMPLATE.format(body="\n".join("    " + ln for ln in body.strip().splitlines()))
    cand = Candidate("kernelbench", {f"{name}.py": src}, name=name)
    opts = EvalOptions(trials=1, timing=False, override_static=True, profile=False, timeout_s=300)
    rep = evaluate(load_task(SWISH), cand, "forward", opts)
    corr = rep.verdict("correctness")
    print(f"HOSTILE-ROW | {name} | passed={rep.passed} | correctness {corr.status.value if corr else '-'}: "
          f"{(corr.reason if corr else '')[:300]} | jail: {rep.jail.get('summary')}")
    return rep, (corr.reason if corr else "")


def test_the_runner_reads_no_root_only_file(monkeypatch):
    rep, why = _eval(monkeypatch, "reader", attack.READ_ROOT_FILE)
    assert "caps 0000000000000000" in why and "shadow: refused" in why, why
    if os.geteuid() == 0:
        assert Path("/etc/shadow").read_text().splitlines()[0][:12] not in why


def test_a_fork_storm_stops_at_the_task_limit(monkeypatch):
    rep, why = _eval(monkeypatch, "forker", attack.fork_storm(3000))
    assert attack.forked(why) < 512, why
    assert not _sleepers("sleep 600")


def test_host_memory_past_the_cgroup_kills_or_refuses(monkeypatch):
    if support():     # without a cgroup the runner has no memory bound (CUDA needs its address space): say so
        pytest.skip(f"this machine gives kbench no cgroup: {support()}")
    rep, why = _eval(monkeypatch, "hog", attack.hold_memory(64, 1024), limits="memory=8G,processes=4096")  # 64 GiB
    assert any(b.startswith("memory") for b in rep.jail.get("bounded", [])), rep.jail
    assert rep.verdict("correctness").status == Status.FAIL and "held" not in why, why


def test_a_file_past_its_limit_and_a_folder_past_its_quota(monkeypatch):
    rep, why = _eval(monkeypatch, "bigfile", attack.one_big_file(1024))
    assert "wrote" not in why and ("File too large" in why or "SIGXFSZ" in why), why
    rep, why = _eval(monkeypatch, "manyfiles", attack.many_files(48, 32))
    assert "wrote" not in why and "scratch quota" in why, why


def _sleepers(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if marker in ln]


def test_a_daemon_of_the_runner_is_gone_when_the_evaluation_ends(monkeypatch):
    seconds = f"{600 + os.getpid() % 997 / 1000}"
    rep, why = _eval(monkeypatch, "daemon", attack.daemon(seconds))
    assert rep.verdict("correctness").status == Status.PASS, why
    assert not _sleepers(f"sleep {seconds}"), "the daemon outlived the evaluation"


def test_an_output_flood_is_capped_and_the_candidate_still_judged(monkeypatch):
    rep, why = _eval(monkeypatch, "printer", attack.output_flood(2048))
    assert rep.verdict("correctness").status == Status.PASS, why
