"""The jail, on this machine and without a GPU: a stand-in candidate imported by the real runner, in the real
jail, tries every escape of INTEGRITY.md's catalog; each attempt fails and the runner goes on working. The
compiler jail keeps a candidate's #include from reading a user's file. A forged record never passes."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.jail import JailSpec, landlock
from engine.pipeline.protocol import wire
from engine.pipeline.judge.runner_process import RunnerGone, RunnerProcess, make_run_dir
from tests.signed_records import signed_record

pytestmark = pytest.mark.skipif(landlock.abi_version() < 1, reason="this kernel has no Landlock")

HOSTILE = '''
import ctypes, errno, json, os, socket, signal
results = {}

def attempt(name, fn):
    try:
        fn()
        results[name] = "SUCCEEDED"
    except OSError as exc:
        results[name] = f"blocked: {type(exc).__name__} {errno.errorcode.get(exc.errno, exc.errno)}"

def read(path):
    with open(path, "rb") as fh:
        fh.read(64)

def write(path):
    with open(path, "w") as fh:
        fh.write("pwned")

def connect(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(("127.0.0.1", port))

def unix_socket(address):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(address)

def udp(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"pwned", ("127.0.0.1", port))

def ancestors():
    pid, out = os.getppid(), []
    while pid > 1 and len(out) < 10:
        out.append(pid)
        try:
            with open(f"/proc/{pid}/status") as fh:
                pid = int(next(l for l in fh if l.startswith("PPid:")).split()[1])
        except OSError:
            break
    return out

libc = ctypes.CDLL(None, use_errno=True)

def syscall_ok(rc):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))

attempt("read parent environ", lambda: read(f"/proc/{os.getppid()}/environ"))
attempt("read init environ", lambda: read("/proc/1/environ"))
attempt("read parent memory", lambda: read(f"/proc/{os.getppid()}/mem"))
attempt("read a dotfile", lambda: read(SECRET))
attempt("write to the user's cwd", lambda: write(os.path.join(CWD, "pwned")))
attempt("write to the workspace .git", lambda: write(os.path.join(GIT, "pwned")))
attempt("write to /tmp", lambda: write("/tmp/kbench-pwned"))
attempt("connect to kbench's loopback port", lambda: connect(PORT))
attempt("connect to kbench's unix socket", lambda: unix_socket(UNIX))
attempt("connect to an abstract unix socket", lambda: unix_socket(ABSTRACT))
attempt("send a UDP datagram to loopback", lambda: udp(UDP_PORT))
attempt("signal the parent", lambda: os.kill(os.getppid(), 0))
attempt("ptrace the parent", lambda: syscall_ok(libc.ptrace(16, os.getppid(), 0, 0)))

def daemon():  # a process that leaves the runner's group and would outlive it
    if os.fork() == 0:
        os.setsid()
        pid = os.fork()
        if pid == 0:
            import time
            time.sleep(600)
        with open(os.path.join(os.environ["HOME"], "daemon.pid"), "w") as fh:
            fh.write(str(pid))
        os._exit(0)
    os.wait()
daemon()
results["ancestors seen"] = len(ancestors())
with open(os.path.join(os.environ["HOME"], "escape.json"), "w") as fh:
    json.dump(results, fh)

def forward(*args):
    return args[0]
'''


@pytest.fixture
def user_files(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    secret = home / ".netrc"
    secret.write_text("machine api.example password hunter2\n")
    cwd = tmp_path / "cwd"
    (cwd / "workspace" / ".git").mkdir(parents=True)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(tmp_path / "kbench.sock"))
    os.chmod(tmp_path / "kbench.sock", 0o777)
    unix.listen(1)
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0kbench-test-{os.getpid()}")
    abstract.listen(1)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    yield {"SECRET": str(secret), "CWD": str(cwd), "GIT": str(cwd / "workspace" / ".git"),
           "PORT": server.getsockname()[1], "UNIX": str(tmp_path / "kbench.sock"),
           "ABSTRACT": f"\0kbench-test-{os.getpid()}", "UDP_PORT": udp.getsockname()[1], "udp": udp}
    for s in (server, unix, abstract, udp):
        s.close()


def _start(run, spec=None):
    rp = RunnerProcess.spawn(run)
    rp.send({"type": "setup", "jail": (spec or run.spec(die_with_parent=True)).to_json(), "timer_so": "/nonexistent",
             "timer_module": "none"})
    jailed = rp.reply(120)
    assert jailed["type"] == "jailed", jailed
    started = rp.reply(120)
    return rp, jailed["report"], started


def test_the_runner_jails_itself_completely_on_this_machine():
    run = make_run_dir()
    rp, report, _ = _start(run)
    try:
        assert report["missing"] == [], report
        assert report["filesystem"] and report["tcp"] and report["network_namespace"] and report["seccomp"]
        assert not report["dumpable"]
        assert report["identity"].startswith(("uid 65534", "uid 0 without capabilities", "uid "))
        assert rp.proc.poll() is None
    finally:
        rp.close()


@pytest.mark.parametrize("jail", ["runner", "profiled"])
def test_a_hostile_import_escapes_nothing_and_the_runner_still_works(user_files, jail):
    """Also in the jail of a process ncu profiles (engine.jail.profiles.profiled_spec), which has no network
    namespace: seccomp and Landlock alone keep every socket closed."""
    from engine.jail.profiles import profiled_spec
    run = make_run_dir()
    src = "".join(f"{k} = {v!r}\n" for k, v in user_files.items() if k != "udp") + HOSTILE
    cand = run.ro / "hostile.py"
    cand.write_text(src)
    os.chmod(cand, 0o644)
    spec = run.spec(die_with_parent=True)
    rp, report, started = _start(run, profiled_spec(spec, []) if jail == "profiled" else spec)
    try:
        assert bool(report["network_namespace"]) == (jail == "runner") and not report["missing"], report
        rp.send({"type": "load", "py_path": str(cand), "module_name": "kb_hostile"})
        assert rp.reply(120) == {"type": "loaded", "tensors": []}
        results = json.loads((run.scratch / "escape.json").read_text())
        escaped = {k: v for k, v in results.items() if v == "SUCCEEDED"}
        assert not escaped, results
        assert len([k for k in results if k != "ancestors seen"]) == 13
        user_files["udp"].setblocking(False)
        with pytest.raises(BlockingIOError):
            user_files["udp"].recv(64)       # nothing arrived, whatever sendto returned
        rp.send({"type": "ping"})
        assert rp.reply(30)["type"] == "pong"
        daemon = int((run.scratch / "daemon.pid").read_text())
        assert Path(f"/proc/{daemon}").exists(), "the daemon should still be running before the runner is closed"
    finally:
        rp.close()
    assert not Path(f"/proc/{daemon}").exists(), "a process the candidate started outlived the runner"
    assert not (Path(user_files["CWD"]) / "pwned").exists()
    assert not (Path(user_files["GIT"]) / "pwned").exists()
    assert not Path("/tmp/kbench-pwned").exists()


FORGER = '''
import os, stat, struct
for fd in range(3, 128):
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, b"KBR1" + struct.pack("<IQQI", 4, 0, 1, 2) + b"{}" + bytes(32))
    except OSError:
        pass
def forward(*args):
    return args[0]
'''


def test_a_forged_result_record_is_detected_and_the_control_channel_survives():
    run = make_run_dir()
    cand = run.ro / "forger.py"
    cand.write_text(FORGER)
    os.chmod(cand, 0o644)
    rp, _, _ = _start(run)
    try:
        rp.send({"type": "load", "py_path": str(cand), "module_name": "kb_forger"})
        assert rp.reply(120)["type"] == "loaded"
        item = rp.records.get(timeout=30)
        assert isinstance(item, wire.Forgery) and "bad signature" in str(item)
        rp.send({"type": "ping"})
        assert rp.reply(30)["type"] == "pong"
    finally:
        rp.close()



def test_a_job_the_runner_answers_without_records_ends_the_wait_within_seconds():
    """The runner answers a job it could not run (here: no GPU; on a GPU, an allocation that failed before the
    helper wrote a record) on the control channel only. The judge, waiting for that job's records, must take the
    answer instead of waiting out its deadline with the GPU's memory held."""
    run = make_run_dir()
    rp, _, started = _start(run)
    try:
        assert started["type"] == "no_gpu", started
        rp.send({"type": "job", "job": 1, "cid": "none", "mode": "check"})
        t0 = time.monotonic()
        with pytest.raises(RunnerGone, match="ended the job without its records: no GPU"):
            rp.next_record(time.monotonic() + 120)
        assert time.monotonic() - t0 < 15
        rp.send({"type": "ping"})
        assert rp.reply(30)["type"] == "pong"   # the answer was taken: the channel is in step again
    finally:
        rp.close()


def test_record_reader_accepts_the_signed_stream_and_rejects_each_forgery():
    key = os.urandom(32)
    good = signed_record(key, wire.HELLO, 0, 0, {"pid": 1}) + signed_record(key, wire.JOB_END, 1, 7, {"status": "ok"})
    reader = wire.RecordReader(io.BytesIO(good), key)
    assert reader.read().type == wire.HELLO and reader.read().body == {"status": "ok"}
    with pytest.raises(wire.ChannelClosed):
        reader.read()
    cases = {
        "bad signature": signed_record(os.urandom(32), wire.HELLO, 0, 0, {}),
        "was injected or dropped": signed_record(key, wire.HELLO, 1, 0, {}),
        "garbage": b"XXXX" + bytes(60),
    }
    for words, stream in cases.items():
        with pytest.raises(wire.Forgery, match=words):
            wire.RecordReader(io.BytesIO(stream), key).read()
    # a payload longer than announced cannot slip a second record past the numbering
    tensor = {"kind": "tensor", "nbytes": 4, "i": 0, "k": 0}
    stream = signed_record(key, wire.OUTPUT, 0, 1, tensor, b"\0\0\0\0") + \
        signed_record(key, wire.OUTPUT, 0, 1, tensor, b"x" * 4)
    r = wire.RecordReader(io.BytesIO(stream), key)
    assert r.read().payload == b"\0\0\0\0"
    with pytest.raises(wire.Forgery, match="injected or dropped"):
        r.read()


def _jailed_python(code: str, spec: JailSpec, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter after applying `spec` to it (the way compilers are jailed)."""
    from engine.jail import command as jailed
    return subprocess.run(jailed([sys.executable, "-I", "-S", "-c", code], spec), capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)


def test_the_compiler_jail_reads_no_user_file_and_writes_only_its_folder(tmp_path):
    from engine.harness.build.steps import compile_jail
    secret = tmp_path / "secret.h"
    secret.write_text("#define TOKEN 42\n")
    work = tmp_path / "work"
    work.mkdir()
    code = textwrap.dedent(f"""
        import socket
        out = []
        for what, fn in [("read", lambda: open({str(secret)!r}).read()),
                         ("write outside", lambda: open({str(tmp_path / 'x')!r}, "w")),
                         ("socket", lambda: socket.socket())]:
            try:
                fn(); out.append(what + " SUCCEEDED")
            except OSError as exc:
                out.append(what + " blocked")
        open({str(work / 'ok')!r}, "w").write("fine")
        print(";".join(out))
    """)
    res = _jailed_python(code, compile_jail(work), tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "read blocked;write outside blocked;socket blocked", res.stdout
    assert (work / "ok").read_text() == "fine"


@pytest.mark.slow
def test_a_candidate_that_includes_a_user_file_does_not_compile(tmp_path, seeded_cache):
    from engine.candidates import Candidate
    from engine.harness.build.stage import build_candidate
    from engine.harness.toolchain import detect
    secret = tmp_path / "id_rsa.h"
    secret.write_text("-----BEGIN PRIVATE KEY----- not for a compiler log\n")
    files = {"kernel.cu": f'#include "{secret}"\n__global__ void k() {{}}\n',
             "binding.cpp": "#include <torch/extension.h>\n"
                            "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n"}
    res = build_candidate(Candidate("native", files), seeded_cache, detect())
    assert not res.ok and "Permission denied" in (res.error or "") + res.log
    assert "PRIVATE KEY" not in res.log and "PRIVATE KEY" not in (res.error or "")


def test_seccomp_and_landlock_hold_after_exec(tmp_path):
    spec = JailSpec(read_exec=tuple(JailSpec().read_exec), write=(str(tmp_path),))
    from engine.jail.profiles import compiler_spec
    spec = compiler_spec(tmp_path, [])
    code = ("import os, ctypes\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.unshare(0x40000000), ctypes.get_errno())\n"   # CLONE_NEWNET again: EPERM
            "print(open('/proc/self/status').read().count('NoNewPrivs:\\t1'))\n")
    res = _jailed_python(code, spec, tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.split()
    assert lines[0] == "-1" and lines[1] == "1" and lines[2] == "1"  # EPERM, no_new_privs set


def test_a_jail_that_must_be_whole_runs_nothing_where_a_layer_fails(tmp_path):
    """The launcher inside a jail that already forbids a new network namespace: a spec that asks for one and for
    a whole jail (refuse_incomplete, as a process ncu profiles has) runs nothing and says why; without
    refuse_incomplete the program runs with the layer missing."""
    import dataclasses

    from engine.jail import REFUSED
    from engine.jail import command as jailed
    from engine.jail.profiles import compiler_spec
    from tests.paths import REPO
    outer = compiler_spec(tmp_path, [])
    outer = dataclasses.replace(outer, read_exec=(*outer.read_exec, str(REPO)))   # the inner launcher's import
    inner = dataclasses.replace(outer, refuse_incomplete=True)
    marker = tmp_path / "ran"
    prog = [sys.executable, "-I", "-S", "-c", f"open({str(marker)!r}, 'w').write('ran')"]
    res = subprocess.run(jailed(jailed(prog, inner), outer), capture_output=True, text=True, timeout=120)
    assert res.returncode == 126, res.stderr
    assert res.stderr.startswith(REFUSED) and "incomplete (network namespace" in res.stderr, res.stderr
    assert not marker.exists()
    lax = dataclasses.replace(inner, refuse_incomplete=False)
    res = subprocess.run(jailed(jailed(prog, lax), outer), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and marker.read_text() == "ran", res.stderr


def test_the_jail_grants_the_toolkit_the_builds_use_where_nvcc_on_path_is_a_wrapper(tmp_path, monkeypatch):
    """No CUDA_HOME, an nvcc on PATH that execs a toolkit elsewhere: the builds compile with that toolkit
    (engine/cuda_home.py), so the compiler jail must let them read it, not /usr/local/cuda."""
    from engine.jail import profiles
    from tests.export.test_export_targets import _toolkit
    real = _toolkit(tmp_path / "opt" / "cuda-13.0")
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    (wrappers / "nvcc").write_text(f'#!/bin/sh\nexec {real}/bin/nvcc "$@"\n')
    (wrappers / "nvcc").chmod(0o755)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", f"{wrappers}{os.pathsep}{os.defpath}")
    assert profiles.cuda_home() == str(real)
    assert os.path.realpath(real) in profiles._code_paths()
