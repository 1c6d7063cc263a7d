"""The precompiled header: <torch/extension.h> and the CUDA context headers built once per toolchain into a
GCC PCH that every binding.cpp includes, and reading g++'s -H output for whether it was used. Split from
engine/harness/build/stage.py.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from engine.harness.build.diagnose import _looks_transient, _tail
from engine.harness.build.steps import run_tool
from engine.harness.toolchain import PCH_HEADERS, Toolchain
from engine.procs import file_lock

PCH_TIMEOUT_S = 900.0      # the PCH is built once per toolchain; a candidate's timeout does not apply to it
PCH_BASENAME = "kbench_torch.h"


@dataclass(frozen=True)
class PchInfo:
    header: Path | None       # pass as `-include header`; g++ picks up header.gch next to it
    built: bool               # this call compiled it (else it existed or another process built it)
    seconds: float            # time spent here, waiting on another builder's lock included
    error: str | None = None  # why there is no PCH (the build then goes on without one)



def pch_dir(cache_root: Path, toolchain: Toolchain) -> Path:
    return Path(cache_root) / "pch" / toolchain.key()


def pch_pending(cache_root: Path, toolchain: Toolchain) -> bool:
    """Whether the next native build will build (or wait for another process building) the PCH: GCC, and neither
    the .gch nor a remembered failure is there yet. Reads two paths; builds nothing."""
    if not toolchain.cxx_is_gcc:
        return False
    d = pch_dir(cache_root, toolchain)
    return not (d / (PCH_BASENAME + ".gch")).is_file() and not (d / "FAILED").is_file()


def ensure_pch(cache_root: Path, toolchain: Toolchain, timeout_s: float = PCH_TIMEOUT_S) -> PchInfo:
    """Build <torch/extension.h> (+ the CUDA context headers) into a GCC PCH once per toolchain key.

    Concurrent builders serialise on a file lock; the .gch is written under a temp name and renamed, so a
    reader never sees a partial one. A deterministic failure is remembered (FAILED) and not retried.
    """
    start = time.monotonic()
    if not toolchain.cxx_is_gcc:
        return PchInfo(None, False, 0.0, f"{toolchain.cxx} is not GCC; building without a precompiled header")
    d = pch_dir(cache_root, toolchain)
    header, gch, failed = d / PCH_BASENAME, d / (PCH_BASENAME + ".gch"), d / "FAILED"
    if gch.is_file():
        return PchInfo(header, False, time.monotonic() - start)
    with file_lock(d / ".lock"):
        if gch.is_file():  # another process built it while we waited
            return PchInfo(header, False, time.monotonic() - start)
        if failed.is_file():
            return PchInfo(None, False, time.monotonic() - start, failed.read_text())
        header.write_text("// kbench precompiled header: what every binding.cpp includes.\n#pragma once\n"
                          + "".join(f"#include <{h}>\n" for h in PCH_HEADERS))
        tmp = d / f"{PCH_BASENAME}.gch.tmp-{os.getpid()}"
        cmd = [toolchain.cxx, "-x", "c++-header", str(header), "-o", str(tmp), *toolchain.host_flags(None)]
        step = run_tool(cmd, d, timeout_s, "pch")
        if step.ok and tmp.is_file():
            os.replace(tmp, gch)
            (d / "command.txt").write_text(" ".join(cmd) + "\n")
            return PchInfo(header, True, time.monotonic() - start)
        tmp.unlink(missing_ok=True)
        reason = (f"timed out after {step.timeout_s:.0f} s" if step.timed_out
                  else f"failed (rc {step.rc}): {_tail(step.output, 1500)}")
        msg = f"precompiled header {header} {reason}; building without it"
        if not step.timed_out and step.rc > 0 and not _looks_transient(step.output):
            failed.write_text(msg)
        return PchInfo(None, False, time.monotonic() - start, msg)


def _pch_used(output: str) -> bool:
    return any(line.startswith("! ") and line.rstrip().endswith(".gch") for line in output.splitlines())
