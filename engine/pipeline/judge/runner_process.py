"""The judge's handle on one runner: its folder, its three descriptors, its signed record stream.

Layout of a run folder (created by the trusted side, mode 0711):
    ro/        what the runner loads (the candidate's build, the timing helper): read-only to it
    ro/pkg/    its Python path: `engine` there links to kbench's engine package, so a jailed Python finds it
               without being able to list the checkout around it
    scratch/   its home, temp and cache folder: the only place it can write (owned by it after a uid drop)
    runner.log its stdout and stderr (the judge's file; kernels may printf)

The runner joins the judge's process group (a kill of the judge's group takes it along), dies with the judge
(PDEATHSIG, which its seccomp filter stops it from clearing), and inherits exactly four descriptors: control,
key, records and the shared arena (engine/pipeline/protocol/arena.py), through which output and argument bytes travel.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import queue
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import jail, procs
from engine.harness.kernelbench.prebuilt import MANIFEST, manifest_path
from engine.jail import JailReport, JailSpec, privileges
from engine.jail.cgroups import StepGroup
from engine.jail.limits import Limits, runner_limits
from engine.jail.profiles import runner_environment, runner_spec
from engine.jail.supervise import WATCH_S, CappedLog, folder_bytes
from engine.pipeline.protocol import messages as msg
from engine.pipeline.protocol.arena import Arena
from engine.pipeline.protocol.types import CandidateSpec
from engine.pipeline.protocol.wire import Channel, ChannelClosed, Forgery, Record, RecordReader

_F_SETPIPE_SZ = 1031
# How long the judge keeps reading records after the runner has answered a job it has not seen end: the records
# precede the answer but travel on another channel.
ANSWER_GRACE_S = 2.0
_LIVE: set[int] = set()   # runners of this process still in use (their orphans are not ours to kill)


class RunnerGone(RuntimeError):
    """The runner exited, was killed, or stopped answering."""


@dataclass(frozen=True)
class RunDir:
    root: Path
    ro: Path
    scratch: Path
    pkg: Path            # the jailed process's PYTHONPATH
    readonly: tuple[Path, ...]   # everything it may read besides the machine's code

    def spec(self, **overrides: Any) -> JailSpec:
        spec = runner_spec(self.scratch, list(self.readonly), step_limits=procs.jail_limits(runner_limits()))
        return dataclasses.replace(spec, **overrides)

    def environment(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return runner_environment(self.scratch, {"PYTHONPATH": str(self.pkg), **(extra or {})})


def make_run_dir(extra_readonly: list[Path] = ()) -> RunDir:
    """A fresh run folder. Its scratch is handed to uid 65534 where the jailed process will become it."""
    root = Path(tempfile.mkdtemp(prefix="kbench-run-"))
    os.chmod(root, 0o711)
    ro, scratch = root / "ro", root / "scratch"
    ro.mkdir(mode=0o755)
    scratch.mkdir(mode=0o700)
    pkg = Path(jail.python_path(str(ro)))
    os.chmod(pkg, 0o755)
    run = RunDir(root, ro, scratch, pkg, (ro, *extra_readonly))
    if os.geteuid() == 0 and all(privileges.readable_by_nobody(p) for p in run.spec().needed_by_nobody):
        os.chown(scratch, privileges.NOBODY, privileges.NOBODY)
    return run


def stage_candidate(run: RunDir, cand: CandidateSpec) -> dict[str, Any]:
    """stage_load's message as JSON: what the profile child's request file carries (engine/pipeline/profiling.py)."""
    return stage_load(run, cand).to_wire()


def stage_load(run: RunDir, cand: CandidateSpec) -> msg.Load:
    """Copy what the runner loads into ro/ (a KernelBench build folder into scratch, since load_inline locks and
    re-checks it); the `load` message for it."""
    if cand.format == "triton":   # its folder, as the build checked it
        return msg.Load(module_name=cand.module_name, triton=True,
                        py_path=str(stage_readonly(run.ro, Path(cand.py_path or ""), "triton")))
    if cand.py_path:
        py_path = stage_readonly(run.ro, Path(cand.py_path))
        if cand.torch_extensions and Path(cand.torch_extensions).is_dir():
            target = stage_readonly(run.scratch, Path(cand.torch_extensions), "torch_ext")
            manifest = manifest_path(Path(cand.torch_extensions))
            if manifest.is_file() and not manifest.is_symlink():   # kbench's, beside the folder (never in it)
                (target / MANIFEST).unlink(missing_ok=True)
                shutil.copyfile(manifest, target / MANIFEST)
            owner = run.scratch.stat()
            for p in [target, *target.rglob("*")]:
                os.chown(p, owner.st_uid, owner.st_gid, follow_symlinks=False)
        return msg.Load(module_name=cand.module_name, py_path=str(py_path))
    return msg.Load(module_name=cand.module_name, so_path=str(stage_readonly(run.ro, Path(cand.so_path or ""))))


def stage_readonly(ro: Path, src: Path, name: str | None = None) -> Path:
    """Copy a file or folder into ro/ (world-readable, owned by the judge's user). Links in a folder are left
    out: a KernelBench build folder is written by the candidate's import, and a link it planted there would
    otherwise copy one of the user's files into the runner's reach (and have its mode changed)."""
    dst = ro / (name or src.name)
    if src.is_dir():
        shutil.copytree(src, dst, dirs_exist_ok=True,
                        ignore=lambda d, names: [n for n in names if os.path.islink(os.path.join(d, n))])
        for p in [dst, *dst.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
    else:
        shutil.copy2(src, dst)
        os.chmod(dst, 0o644)
    return dst


@dataclass
class RunnerProcess:
    proc: subprocess.Popen
    ctl: Channel
    key: bytes
    run_dir: Path
    records: "queue.Queue[Record | BaseException]" = field(default_factory=queue.Queue)
    jail: JailReport | None = None
    device: dict[str, Any] = field(default_factory=dict)
    log_path: Path | None = None
    started: int = 0          # the runner's start time (clock ticks since boot)
    forged: str = ""          # set by the record reader when a record the helper did not sign arrives
    arena: Arena | None = None
    group: StepGroup | None = None   # its cgroup (memory, tasks), where this machine gives kbench one
    stopped: str = ""         # why the judge's side stopped it (a limit it went past), "" otherwise

    @classmethod
    def spawn(cls, run: RunDir, gpu: int | None = None, extra_env: dict[str, str] | None = None) -> "RunnerProcess":
        judge_end, runner_end = socket.socketpair()
        key = os.urandom(32)
        key_r, key_w = os.pipe()
        rec_r, rec_w = os.pipe()
        try:
            fcntl.fcntl(rec_w, _F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
        arena = Arena()
        env = run.environment(extra_env)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        log_path = run.root / "runner.log"
        cmd = [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-m", "engine.pipeline.runner",
               str(runner_end.fileno()), str(key_r), str(rec_w), str(arena.fd)]
        procs.become_subreaper()
        out_r, out_w = os.pipe()    # its output goes to a capped file through the judge, never unbounded
        try:
            proc = subprocess.Popen(cmd, cwd=run.scratch, env=env, stdin=subprocess.DEVNULL, stdout=out_w,
                                    stderr=subprocess.STDOUT, pass_fds=(runner_end.fileno(), key_r, rec_w, arena.fd))
        except BaseException:   # no runner: nothing of it may stay open in a long-lived process
            arena.close()
            for end in (judge_end, runner_end):
                end.close()
            for fd in (key_r, key_w, rec_r, rec_w, out_r, out_w):
                os.close(fd)
            raise
        os.close(out_w)
        runner_end.close()
        os.close(key_r)
        os.close(rec_w)
        os.write(key_w, key)
        os.close(key_w)
        _LIVE.add(proc.pid)
        limits = Limits.from_json(run.spec().limits)
        rp = cls(proc, Channel(judge_end), key, run.root, log_path=log_path, arena=arena,
                 group=StepGroup.create(limits.memory, limits.processes))
        rp.started = procs.start_ticks(proc.pid) or 0
        rp._start_reader(rec_r)
        log = CappedLog(str(log_path), limits.output)
        threading.Thread(target=lambda: (log.pump(out_r), log.close()), name="kbench-runner-log", daemon=True).start()
        if limits.scratch:
            threading.Thread(target=rp._watch, args=(run.scratch, limits.scratch), name="kbench-runner-folder",
                             daemon=True).start()
        return rp

    def cgroup_dirs(self) -> tuple[str, ...]:
        """The folders of its cgroup, for its jail to join ((): none on this machine)."""
        return tuple(str(d) for d in self.group.dirs) if self.group is not None else ()

    def _watch(self, scratch: Path, quota: int) -> None:
        """Stop the runner (and its cgroup) once its scratch folder holds more than `quota` bytes."""
        while self.proc.poll() is None:
            if folder_bytes([str(scratch)]) > quota:
                self.stopped = f"its folder grew past {quota} bytes (the scratch quota)"
                self.proc.kill()
                if self.group is not None:
                    self.group.kill()
                return
            time.sleep(WATCH_S)

    def _start_reader(self, fd: int) -> None:
        stream = open(fd, "rb", buffering=1 << 20)
        reader = RecordReader(stream, self.key, arena_capacity=self.arena.capacity if self.arena else None)

        def pump() -> None:
            try:
                while True:
                    self.records.put(reader.read())
            except Forgery as exc:
                self.forged = str(exc)
                self.records.put(exc)
            except (ChannelClosed, OSError, ValueError) as exc:
                self.records.put(exc)
            finally:
                stream.close()

        threading.Thread(target=pump, name="kbench-records", daemon=True).start()

    # -- control channel ----------------------------------------------------------------------------------
    def send(self, request: msg.Request | dict[str, Any], tensors: Any = (), placed: list[int] | None = None) -> None:
        """A request (a raw header: only tests that speak the wire itself send one)."""
        header = request if isinstance(request, dict) else request.to_wire()
        try:
            self.ctl.send(header, tensors, placed)
        except OSError as exc:
            raise RunnerGone(self.describe_exit(f"the runner stopped listening ({exc})")) from exc

    def answer(self, timeout: float) -> msg.Answer:
        """The runner's next reply, parsed. The candidate can write to this socket: a reply that is not one of
        the protocol's (forged, garbled, not even JSON) is Garbled, which every wait takes as an unexpected
        reply, never an exception. RunnerGone as `reply`."""
        try:
            return msg.parse_reply(self.reply(timeout))
        except msg.MessageError as exc:
            return msg.Garbled(str(exc))

    def reply(self, timeout: float) -> dict[str, Any]:
        """The runner's next reply as it came, unchecked (`answer` checks it); MessageError where it is no JSON
        object."""
        try:
            header, _ = self.ctl.recv(timeout=max(timeout, 0.01), tensors=False)
            return header
        except (socket.timeout, TimeoutError) as exc:
            raise RunnerGone(f"the runner gave no answer within {timeout:.0f} s") from exc
        except (ChannelClosed, OSError) as exc:
            raise RunnerGone(self.describe_exit("the runner closed its control channel")) from exc

    def next_record(self, deadline: float) -> Record:
        """The next signed record; RunnerGone past the deadline, when the runner died, or when it answered on the
        control channel while records were still awaited (its job ended without them); Forgery propagates."""
        answered_at = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RunnerGone("timed out")
            try:
                item = self.records.get(timeout=min(left, 0.5))
            except queue.Empty:
                if self.proc.poll() is not None and self.records.empty():
                    raise RunnerGone(self.describe_exit("the runner died"))
                if self._answer_waiting():
                    # The runner writes a job's records before its answer, but on another channel: give the
                    # record reader a moment to deliver what is still in the pipe before concluding.
                    answered_at = answered_at or time.monotonic()
                    if time.monotonic() - answered_at >= ANSWER_GRACE_S:
                        why = msg.explain(self.answer(1.0))
                        raise RunnerGone(f"the runner ended the job without its records: {why}")
                continue
            if isinstance(item, Forgery):
                raise item
            if isinstance(item, BaseException):
                raise RunnerGone(self.describe_exit(f"the record stream ended ({item})"))
            return item

    def _answer_waiting(self) -> bool:
        try:
            return bool(select.select([self.ctl.sock], [], [], 0)[0])
        except (OSError, ValueError):
            return False

    # -- end ----------------------------------------------------------------------------------------------
    def describe_exit(self, what: str) -> str:
        rc = self.proc.poll()
        if rc is None:
            try:
                rc = self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                return what
        if rc < 0:
            try:
                cause = f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                cause = f"killed by signal {-rc}"
        else:
            cause = f"exited with code {rc}"
        if self.stopped:
            cause += f" ({self.stopped})"
        tail = self.log_tail()
        return f"{what}: {cause}" + (f": {tail}" if tail else "")

    def log_tail(self, lines: int = 12) -> str:
        try:
            text = self.log_path.read_bytes()[-4000:].decode(errors="replace") if self.log_path else ""
        except OSError:
            return ""
        keep = [ln.strip() for ln in text.strip().splitlines() if ln.strip()][-lines:]
        return " | ".join(keep)

    def close(self) -> None:
        """Stop the runner and everything it started, daemons that left its process group included (they were
        re-parented to this process, a subreaper: any child of ours born after the runner that is not another
        live runner is one of them)."""
        try:
            self.ctl.send(msg.Exit().to_wire())
        except OSError:
            pass
        try:
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
        tree = procs.process_tree()
        procs.kill_pids(procs.descendants(self.proc.pid, tree))
        self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        _LIVE.discard(self.proc.pid)
        if self.group is not None:   # everything of its cgroup, wherever it was re-parented
            self.group.remove()
        strays = [p for p in tree.get(os.getpid(), []) if p not in _LIVE and p != self.proc.pid
                  and (procs.start_ticks(p) or 0) >= self.started]
        procs.kill_pids([q for p in strays for q in (p, *procs.descendants(p, tree))])
        for p in strays:  # they are our children now: reap them
            try:
                os.waitpid(p, 0)
            except ChildProcessError:
                pass
        try:
            self.ctl.sock.close()
        except OSError:
            pass
        if self.arena is not None:
            self.arena.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)
