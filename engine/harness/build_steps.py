"""What every build path runs on: one compiler step (scrubbed environment, jail, process group killed on
timeout) and its result, the failure a step can end in, and what a build reads off a candidate's sources
(the module name it declares, the vendor libraries it includes). Split from engine/harness/build.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from engine.harness.build_result import FailureKind
from engine.harness.toolchain import Toolchain
from engine.harness.vendor_libs import library_files, libraries_used, search_dirs
from engine.jail import JailSpec
from engine.jail import command as jailed
from engine.jail.profiles import compiler_spec
from engine.procs import kill_group

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


def compile_jail(work: Path, readonly: list[Path] = (), toolchain: Toolchain | None = None) -> JailSpec:
    """Compilers see the toolchain and `readonly`, write only `work`: a candidate's `#include "/home/..."`
    reads nothing, and nothing a compiler prints can carry a user's file into a log or a prompt."""
    programs = [toolchain.cxx, toolchain.nvcc] if toolchain is not None else []
    return compiler_spec(work, list(readonly), programs)


def run_tool(cmd: list[str], cwd: Path, timeout_s: float, name: str, jail: JailSpec | None = None) -> StepResult:
    """Run one compiler command in its own process group with a scrubbed environment (in `jail`, if given);
    kill the group on timeout."""
    start = time.monotonic()
    timeout_s = max(timeout_s, 0.5)
    env = compiler_env({"TMPDIR": str(jail.write[0])} if jail is not None and jail.write else None)
    try:
        proc = subprocess.Popen(jailed(cmd, jail), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        return StepResult(name, tuple(cmd), 127, f"cannot run {cmd[0]}: {exc}", time.monotonic() - start)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc)
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a grandchild left the group and holds the pipe: give up on output
            out = b""
    except BaseException:
        kill_group(proc)
        proc.wait()
        raise
    text = out.decode("utf-8", errors="replace") if out else ""
    return StepResult(name, tuple(cmd), proc.returncode if proc.returncode is not None else -9, text,
                      time.monotonic() - start, timed_out, timeout_s)


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
