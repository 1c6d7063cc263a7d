"""Process plumbing, in one place: environments, spawning in a new session, killing a group, reaping, file locks.

Every child kbench starts (judge, profiler, roofline probe, compilers) gets its own session, so on a timeout
its whole process group is killed: a kernel that spins forever, or a helper it spawned, cannot outlive the
evaluation. Results come back as a JSON file the child rewrites after every step, never through stdout
(kernels may printf). No child gets an API key: the environment is built from an allowlist.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock

from engine import jail as jails
from engine.config.env import env_raw
from engine.jail.limits import Limits, overridden
from engine.jail.profiles import hand_over
from engine.jail.supervise import reap_finished

if TYPE_CHECKING:
    from engine.jail import JailSpec

# Variables a child may see. Everything else — API keys, tokens, cloud credentials — is dropped.
_ALLOWED = {"PATH", "HOME", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TMPDIR", "TZ", "SHELL",
            "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "CC", "CXX",
            "TORCH_CUDA_ARCH_LIST", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "MAX_JOBS", "KBENCH_CACHE",
            "KBENCH_JAIL_LIMITS"}
_ALLOWED_PREFIXES = ("NCCL_", "NVIDIA_", "TORCH_SYMM_MEM_", "NVSHMEM_")
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "ANTHROPIC", "AUTH")


def jail_limits(defaults: Limits) -> Limits:
    """The limits of a jailed step: `defaults` (engine/jail/limits.py, per kind of step) with the user's
    KBENCH_JAIL_LIMITS applied."""
    return overridden(defaults, env_raw("KBENCH_JAIL_LIMITS"))


def scrubbed_env(extra: dict[str, str] | None = None, gpu: int | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if (k in _ALLOWED or k.startswith(_ALLOWED_PREFIXES))
           and not any(m in k.upper() for m in _SECRET_MARKERS)}
    # The child must import this engine even when it is not installed (e.g. a checkout on a GPU box).
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONUNBUFFERED"] = "1"
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    elif "CUDA_VISIBLE_DEVICES" in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    env.update(extra or {})
    return env


@dataclass
class ChildOutcome:
    result: dict[str, Any]          # what the child last wrote (may be partial)
    returncode: int | None
    timed_out: bool
    seconds: float
    output_tail: str                # last lines of the child's stdout+stderr
    report: dict[str, Any] = dataclasses.field(default_factory=dict)   # its supervisor's: jail, limits, why stopped

    @property
    def crashed(self) -> bool:
        return self.timed_out or self.returncode != 0 or not self.result.get("finished")

    def describe_crash(self) -> str:
        where = self.result.get("progress") or {}
        at = f" during {where.get('stage')}" + (f" of config {where['config']}" if where.get("config") else "") \
            if where else ""
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s{at}; the process group was killed"
        rc = self.returncode
        if rc is not None and rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = f"signal {-rc}"
            cause = f"killed by {name}"
        else:
            cause = f"exited with code {rc}"
        stopped = self.report.get("stopped") if isinstance(self.report, dict) else ""
        if stopped:         # its supervisor ended it: a limit it went past
            cause += f" ({stopped})"
        tail = self.output_tail.strip().splitlines()[-6:]
        return f"the evaluator process {cause}{at}" + (": " + " | ".join(tail) if tail else "")


def run_child(module: str, request: dict[str, Any], *, timeout_s: float, gpu: int | None = None,
              extra_env: dict[str, str] | None = None, workdir: Path | None = None,
              jail: JailSpec | None = None) -> ChildOutcome:
    """Run `python -m module REQUEST.json` in a new session under a step supervisor (engine/jail/supervise.py:
    its output in a capped log, every process it starts killed when it ends or when this process dies); return
    what it wrote, however it ended. With `jail` (an engine.jail.JailSpec) the child runs in it, its request
    folder added to what it may write."""
    with tempfile.TemporaryDirectory(prefix="kbench-eval-", dir=workdir) as tmp:
        step = StepFolder(Path(tmp))
        req_path = write_request(step.box, request)
        env = scrubbed_env(extra_env, gpu)
        cmd = [sys.executable, "-m", module, str(req_path)]
        spec = None
        if jail is not None:
            env["PYTHONPATH"] = jails.python_path(str(step.box))
            cmd = [sys.executable, "-P", "-m", module, str(req_path)]
            spec = dataclasses.replace(jail, write=(*jail.write, str(step.box)))
            hand_over(spec)
        t0 = time.monotonic()
        proc = subprocess.Popen(jails.command(cmd, spec, log=str(step.log), report=str(step.report)), cwd=step.box,
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        return await_child(proc, step, timeout_s, t0)


@dataclass(frozen=True)
class StepFolder:
    """A child's folder: `box/` is the child's (its request, its result, its scratch; the jail's writable folder),
    the log and the supervisor's report beside it are kbench's (the child cannot rewrite them)."""
    root: Path

    def __post_init__(self) -> None:
        os.chmod(self.root, 0o711)     # a child that becomes uid 65534 walks through to its box
        self.box.mkdir(mode=0o700, exist_ok=True)

    @property
    def box(self) -> Path:
        return self.root / "box"

    @property
    def log(self) -> Path:
        return self.root / "output.log"

    @property
    def report(self) -> Path:
        return self.root / "report.json"


def write_request(tmpdir: Path, request: dict[str, Any]) -> Path:
    req_path = tmpdir / "request.json"
    req_path.write_text(json.dumps({**request, "result_path": str(tmpdir / "result.json")}))
    return req_path


def await_child(proc: subprocess.Popen, step: StepFolder, timeout_s: float, t0: float) -> ChildOutcome:
    """Wait for a child of run_child's layout (a StepFolder); stop its step after, whatever is left of it."""
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        stop_step(proc)
    seconds = time.monotonic() - t0
    result: dict[str, Any] = {}
    result_path = step.box / "result.json"
    try:
        result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    except (OSError, ValueError):    # not JSON, or not UTF-8: a child that ran candidate code may write anything
        result = {}
    if not isinstance(result, dict):
        result = {}
    try:
        tail = step.log.read_bytes()[-4000:].decode(errors="replace")
    except OSError:
        tail = ""
    return ChildOutcome(result, None if timed_out else proc.returncode, timed_out, seconds, tail,
                        read_report(step.report))


def read_report(path: Path) -> dict[str, Any]:
    """A step supervisor's report (kbench's own file, outside the jail), {} where there is none."""
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}


def stop_step(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """End a supervised step now (nothing happens to one that has ended): SIGTERM to its supervisor, which kills
    the step's whole tree, daemons and cgroup included, and reports; then its process group for good measure."""
    if proc.poll() is None:
        try:
            proc.terminate()
            proc.wait(timeout=grace_s)
        except (OSError, subprocess.TimeoutExpired):
            pass
    kill_group(proc)
    reap(proc)


class StandbyChild:
    """`python -m module --standby ARGS...` started before its request exists (a warm spare): it gets ready,
    then reads its request's path from stdin (EOF: not needed, it exits). Same folder layout, session and
    environment rules as run_child; one request per child."""

    def __init__(self, module: str, args: list[str], *, gpu: int | None = None,
                 extra_env: dict[str, str] | None = None):
        self._tmp = tempfile.TemporaryDirectory(prefix="kbench-eval-")
        self.step = StepFolder(Path(self._tmp.name))
        self.tmpdir = self.step.box
        cmd = [sys.executable, "-m", module, "--standby", *args]
        self.proc = subprocess.Popen(jails.command(cmd, None, log=str(self.step.log), report=str(self.step.report)),
                                     cwd=self.tmpdir, env=scrubbed_env(extra_env, gpu), stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def state(self, name: str) -> dict[str, Any] | None:
        """What the child wrote to `name` in its folder (its own readiness report), if anything yet."""
        try:
            state = json.loads((self.tmpdir / name).read_text())
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    def run(self, request: dict[str, Any], timeout_s: float) -> ChildOutcome:
        t0 = time.monotonic()
        try:
            req_path = write_request(self.tmpdir, request)
            assert self.proc.stdin is not None
            self.proc.stdin.write(f"{req_path}\n".encode())
            self.proc.stdin.close()
        except OSError:
            pass   # it died meanwhile: await_child reports how
        try:
            return await_child(self.proc, self.step, timeout_s, t0)
        finally:
            self._tmp.cleanup()

    def let_go(self, grace_s: float) -> None:
        """Not needed: EOF on its stdin and `grace_s` to exit by itself (removing its runner's folder), then
        stopped (0: at once)."""
        if grace_s > 0:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
                self.proc.wait(timeout=grace_s)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass            # stopped below all the same
        self.stop()

    def discard(self) -> None:
        """Not needed after all: close its stdin (it cleans up and exits), then make sure of it."""
        self.let_go(20.0)

    def stop(self) -> None:
        """End it now, whatever it is doing (its supervisor kills its tree), and remove its folder."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        stop_step(self.proc)
        self._tmp.cleanup()


def kill_group(proc: subprocess.Popen) -> None:
    """Kill a child started with start_new_session=True together with everything it spawned."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def reap(proc: subprocess.Popen) -> None:
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks since boot) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()   # the name may hold spaces and parentheses
    return int(fields[1]), int(fields[19])


def process_tree() -> dict[int, list[int]]:
    """Children of every process, from /proc."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            tree.setdefault(st[0], []).append(int(entry))
    return tree


def descendants(pid: int, tree: dict[int, list[int]] | None = None) -> list[int]:
    tree = process_tree() if tree is None else tree
    out, todo = [], list(tree.get(pid, ()))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(tree.get(p, ()))
    return out


def running(pid: int, ticks: int | None) -> bool:
    """Whether the process `pid` that started at `ticks` (start_ticks) still runs: not gone, not another process
    that took its pid, not a zombie (a process that ended and that its parent, perhaps a subreaper that never
    waits, has not reaped)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = text[text.rindex(")") + 2:].split()
    return fields[0] not in ("Z", "X") and ticks is not None and int(fields[19]) == ticks


def start_ticks(pid: int) -> int | None:
    st = _stat(pid)
    return st[1] if st else None


def process_age() -> float:
    """Seconds since this process started, by the kernel's count (its start in clock ticks since boot, 10 ms
    steps), interpreter start-up included; 0.0 where /proc cannot say."""
    ticks = start_ticks(os.getpid())
    if ticks is None:
        return 0.0
    return max(time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"), 0.0)


def become_subreaper() -> None:
    """Orphans of our descendants are re-parented to us instead of init, so we can find and kill them."""
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def exit_with_parent(poll_s: float = 0.2) -> None:
    """End this process (os._exit, no teardown) as soon as its parent is gone: a watchdog thread for a process
    whose parent-death signal would fire too early (prctl's is bound to the thread that forked it, and a pool's
    workers are forked from whichever thread submits first)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="kbench-parent-watch", daemon=True).start()


def end_descendants(grace_s: float = 0.5) -> None:
    """Stop every process this one started, now: SIGTERM to all (a step's supervisor then kills its step's tree),
    SIGKILL to whatever is left after `grace_s`, again until none is left (this process should be a subreaper,
    so that the orphans of what it kills come back to it and are found). For a second Ctrl-C: quit at once."""
    deadline = time.monotonic() + grace_s
    sig = signal.SIGTERM
    for _ in range(200):
        left = descendants(os.getpid())
        if not left:
            return
        for p in left:
            try:
                os.kill(p, sig)
            except (ProcessLookupError, PermissionError):
                pass
        reap_finished()
        time.sleep(0.02)
        if time.monotonic() >= deadline:
            sig = signal.SIGKILL


def kill_pids(pids: list[int]) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive flock on `path` (created if missing), released by the kernel if the holder dies. Waits
    as long as it takes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path):
        yield
