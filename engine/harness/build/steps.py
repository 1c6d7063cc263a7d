"""What every build path runs on: one compiler step (scrubbed environment, jail, process group killed on
timeout) and its result, the failure a step can end in, and what a build reads off a candidate's sources
(the module name it declares, the vendor libraries it includes). Split from engine/harness/build/stage.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.harness.build.result import FailureKind
from engine.harness.toolchain import Toolchain
from engine.harness.vendor_libs import libraries_used, library_files, search_dirs
from engine.jail import JailSpec
from engine.jail import command as jailed
from engine.jail.limits import COMPILE, Limits
from engine.jail.profiles import compiler_spec, hand_over
from engine.procs import jail_limits, read_report, stop_step

# Variables a compiler may legitimately need. Everything else (API keys, tokens, NVCC_APPEND_FLAGS and other
# flag injectors that would change object code behind the cache key's back) is dropped.
ENV_ALLOWLIST = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR", "TMP", "TEMP",
                 "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH")


@dataclass(frozen=True)
class StepResult:
    name: str                 # "nvcc kernel.cu", "g++ binding.cpp", "link", "pch"
    cmd: tuple[str, ...]
    rc: int
    output: str
    seconds: float
    timed_out: bool = False
    timeout_s: float = 0.0
    report: dict[str, Any] = field(default_factory=dict, compare=False)   # the step supervisor's (jail, limits)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out


class _Failed(Exception):
    def __init__(self, kind: FailureKind, error: str):
        super().__init__(error)
        self.kind = kind
        self.error = error


# ---------------------------------------------------------------------------- subprocesses
def compiler_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["LC_ALL"] = "C"  # plain ASCII quotes and English messages: the error parser depends on them
    env.update(extra or {})
    return env


def compile_jail(work: Path, readonly: list[Path] = (), toolchain: Toolchain | None = None,
                 step_limits: Limits = COMPILE) -> JailSpec:
    """Compilers see the toolchain and `readonly`, write only `work`: a candidate's `#include "/home/..."`
    reads nothing, and nothing a compiler prints can carry a user's file into a log or a prompt. They drop root
    (engine.jail.profiles.compiler_spec) and are bounded by `step_limits` (and KBENCH_JAIL_LIMITS)."""
    programs = [toolchain.cxx, toolchain.nvcc] if toolchain is not None else []
    return compiler_spec(work, list(readonly), programs, jail_limits(step_limits))


def run_tool(cmd: list[str], cwd: Path, timeout_s: float, name: str, jail: JailSpec | None = None) -> StepResult:
    """Run one compiler command with a scrubbed environment (in `jail`, if given) under a step supervisor
    (engine/jail/supervise.py): its output goes to a capped file, not into this process's memory, and when it
    ends, on its timeout or when kbench dies, every process it started dies with it."""
    start = time.monotonic()
    timeout_s = max(timeout_s, 0.5)
    env = compiler_env({"TMPDIR": str(jail.write[0])} if jail is not None and jail.write else None)
    if jail is not None:
        hand_over(jail)
    with tempfile.TemporaryDirectory(prefix="kbench-step-") as tmp:   # the supervisor's, out of the jail's reach
        log, report = Path(tmp) / "output.log", Path(tmp) / "report.json"
        try:
            with open(Path(tmp) / "supervisor.log", "wb") as own:
                proc = subprocess.Popen(jailed(cmd, jail, log=str(log), report=str(report)), cwd=cwd, env=env,
                                        stdin=subprocess.DEVNULL, stdout=own, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        except OSError as exc:
            return StepResult(name, tuple(cmd), 127, f"cannot run {cmd[0]}: {exc}", time.monotonic() - start)
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            stop_step(proc)
        except BaseException:
            stop_step(proc)
            raise
        text = step_output(Path(tmp))
        return StepResult(name, tuple(cmd), proc.returncode if proc.returncode is not None else -9, text,
                          time.monotonic() - start, timed_out, timeout_s, read_report(report))


def step_output(folder: Path) -> str:
    """What a supervised step printed (its capped log), and what its supervisor said where it said anything."""
    parts = []
    for name in ("output.log", "supervisor.log"):
        try:
            parts.append((folder / name).read_bytes().decode("utf-8", errors="replace"))
        except OSError:
            continue
    return "".join(parts)


_MODULE_DECL = re.compile(r"PYBIND11_MODULE\s*\(\s*([A-Za-z_]\w*)\s*,")


def _module_name(source: str, default: str) -> str:
    """TORCH_EXTENSION_NAME (the norm) becomes kb_<hash>; a hard-coded PYBIND11_MODULE name is kept,
    since PyInit_<name> is what Python will look for."""
    m = _MODULE_DECL.search(_strip_comments(source))
    return m.group(1) if m and m.group(1) != "TORCH_EXTENSION_NAME" else default


def _declares_extension_name(binding: str) -> bool:
    """Whether the binding names its module TORCH_EXTENSION_NAME (the norm), rather than a name of its own."""
    m = _MODULE_DECL.search(_strip_comments(binding))
    return bool(m) and m.group(1) == "TORCH_EXTENSION_NAME"


def _strip_comments(source: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", source, flags=re.DOTALL)



def _vendor_link(files: dict[str, str], tc: Toolchain) -> list[str]:
    """The vendor libraries the sources include (engine/harness/vendor_libs.py), as files to link; a library
    that cannot be found is left out, and the link then names its unresolved symbols."""
    names = libraries_used(files)
    return library_files(names, search_dirs(list(tc.library_dirs)))[0] if names else []
