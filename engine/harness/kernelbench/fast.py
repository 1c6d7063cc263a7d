"""A KernelBench candidate's load_inline build, the way kbench builds its own: faster, and its first error at once.

Run inside the KernelBench compile child (engine/harness/kernelbench/compile.py), around torch's JIT build:

- `use_pch`: the C++ half of each extension (load_inline's main.cpp: torch/extension.h and the pybind11 module)
  is compiled against kbench's precompiled header (engine/harness/pch.py), by the toolchain's compiler with the
  header's flags, so g++ takes seconds instead of half a minute over torch's headers. The flags are added where
  torch writes its build.ninja, after its versioner has hashed the build's arguments: the versioner state the
  runner replays (engine/harness/kernelbench/prebuilt.py) is the one the candidate's own arguments give.
  nvcc cannot use a GCC precompiled header, so cuda.cu is compiled as torch compiles it.
- `fail_fast`: torch runs ninja to its end, and ninja, once a compile fails, waits for the compiles still
  running; with main.cpp and cuda.cu compiled side by side, a typo in one was reported only when the other had
  finished (minutes for a cuda.cu over torch's headers). Here ninja's first failure ends the build: its whole
  output is read, ninja and its compilers are killed, and torch's own error (`Error building extension ...`)
  is raised with that output.

Measured on a 2-core machine without a GPU (CPU load 5 from other work): a one-character typo in cuda.cu was
reported after 75 s before, ~25 s after.
"""

from __future__ import annotations

import inspect
import os
import queue
import signal
import subprocess
import threading
import time
from typing import Any, Callable

IDLE_AFTER_FAILURE_S = 0.5     # ninja prints a failed job's output in one piece: quiet this long, it is all there


def use_pch(cpp: Any, header: str, flags: list[str]) -> None:
    """Compile every extension's C++ sources with `-include header` and `flags` (the flags the header's .gch was
    built with) by wrapping torch's `_write_ninja_file_and_build_library`. A torch whose function takes other
    arguments builds as it would."""
    original: Callable[..., Any] = cpp._write_ninja_file_and_build_library
    signature = inspect.signature(original)

    def build(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)
        if "extra_cflags" in bound.arguments:
            bound.arguments["extra_cflags"] = [*(bound.arguments["extra_cflags"] or []), *flags, "-include", header]
        return original(*bound.args, **bound.kwargs)

    cpp._write_ninja_file_and_build_library = build


def fail_fast(cpp: Any) -> None:
    """Replace torch's `_run_ninja_build` with one that stops at ninja's first failed compile."""
    def run(build_directory: str, verbose: bool, error_prefix: str) -> None:
        command = ["ninja", "-v"]
        workers = cpp._get_num_workers(verbose)
        if workers is not None:
            command += ["-j", str(workers)]
        rc, output = run_until_failure(command, build_directory)
        if rc != 0:
            raise RuntimeError(f"{error_prefix}: {output}" if output else error_prefix)

    cpp._run_ninja_build = run


def run_until_failure(command: list[str], cwd: str, idle_s: float = IDLE_AFTER_FAILURE_S) -> tuple[int, str]:
    """Run ninja (`command`) in `cwd`; its exit status and output. At its first `FAILED:` block, once ninja has
    been quiet for `idle_s`, it and the compilers it started are killed: the status is then 1."""
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=os.environ.copy(), start_new_session=True)
    lines: queue.Queue[bytes | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True, name="kbench-ninja-output").start()
    out: list[bytes] = []
    failed = False
    try:
        while True:
            try:
                line = lines.get(timeout=idle_s if failed else None)
            except queue.Empty:          # the failed job's output is complete; the others' does not matter
                _kill(proc)
                return 1, _text(out)
            if line is None:
                return proc.wait(), _text(out)
            out.append(line)
            failed = failed or line.startswith(b"FAILED:")
    finally:
        if proc.poll() is None:
            _kill(proc)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    deadline = time.monotonic() + 10
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)


def _text(out: list[bytes]) -> str:
    return b"".join(out).decode("utf-8", errors="replace")
