"""How fast can a candidate's own binding.cpp compile? g++ with kbench's precompiled header against clang++ with a
precompiled header, plain and built with `-fpch-instantiate-templates` (clang instantiates the header's pending
templates once, in the PCH; g++ has no such option and instantiates them again in every translation unit).

    CUDA_HOME=/usr/local/cuda python scripts/bench_binding_compilers.py --repeats 3 [--clang clang++-16] [--run]

The binding is tests/fixtures/native/binding.cpp with kbench's own host flags (engine/harness/toolchain.py) and
the headers kbench precompiles (PCH_HEADERS). Every compiler gets the same flags and runs in the same call, one
after another, so the ratios are side by side. `--trace` adds clang's -ftime-trace phase totals. `--run` links
the clang-compiled binding.o with the nvcc-compiled kernel.o (g++ link, as kbench links) and calls it on the GPU,
to check the mixed-compiler extension works. This measures compilers; kbench's builds use g++.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.harness import toolchain  # noqa: E402 - after the repository is on sys.path
from engine.harness.build.native import BINDING_MODULE  # noqa: E402

FIXTURE = REPO / "tests" / "fixtures" / "native"


def timed(label: str, cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{label} failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds


def split_build(binding_cmd: list[str], tc: toolchain.Toolchain, cwd: Path) -> float:
    """A whole cold split build as kbench runs it: nvcc kernel.cu and the binding's compile side by side, then
    the link; wall seconds."""
    start = time.perf_counter()
    procs = [subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for cmd in ([tc.nvcc, "-c", "kernel.cu", "-o", "kernel.o", *tc.nvcc_kernel_flags()], binding_cmd)]
    for proc in procs:
        if proc.wait() != 0:
            sys.exit(f"{proc.args[0]} failed:\n{proc.stderr.read().decode(errors='replace')[-3000:]}")
        proc.stderr.close()
    link = [tc.cxx, "kernel.o", binding_cmd[binding_cmd.index("-o") + 1], "-o", f"{BINDING_MODULE}.so",
            *tc.link_flags()]
    timed("link", link, cwd)
    return time.perf_counter() - start


def find_clang(wanted: str | None) -> str | None:
    names = [wanted] if wanted else ["clang++", *(f"clang++-{v}" for v in range(22, 10, -1))]
    return next((shutil.which(n) for n in names if shutil.which(n)), None)


def trace_totals(trace: Path, top: int = 6) -> list[tuple[str, float]]:
    events = json.loads(trace.read_text())["traceEvents"]
    totals = [(e["name"][len("Total "):], e["dur"] / 1e6) for e in events if e.get("name", "").startswith("Total ")]
    return sorted(totals, key=lambda x: -x[1])[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--clang", help="the clang++ to compare (default: the newest clang++ on PATH)")
    ap.add_argument("--trace", action="store_true", help="clang's -ftime-trace phase totals for the fastest form")
    ap.add_argument("--run", action="store_true", help="link the clang binding with an nvcc kernel and call it")
    args = ap.parse_args()

    tc = toolchain.detect()
    clang = find_clang(args.clang)
    flags = tc.host_flags(BINDING_MODULE)
    work = Path(tempfile.mkdtemp(prefix="kbench-binding-cc-"))
    for f in FIXTURE.iterdir():
        shutil.copy(f, work / f.name)
    (work / "kb_torch.h").write_text("".join(f"#include <{h}>\n" for h in toolchain.PCH_HEADERS))
    print(f"{tc.describe()}; clang: {clang or 'none found'}; {args.repeats} repeats; in {work}", flush=True)

    rows: list[tuple[str, float, list[float]]] = []

    def row(label: str, once: Callable[[], float]) -> None:
        runs = [once() for _ in range(args.repeats)]
        rows.append((label, statistics.median(runs), runs))
        print(f"{label:55s} median {statistics.median(runs):6.2f} s  ({', '.join(f'{r:.2f}' for r in runs)})",
              flush=True)

    def compiles(label: str, cmd: list[str]) -> None:
        row(label, lambda: timed(label, cmd, work))

    pch_s = timed("g++ pch", [tc.cxx, "-x", "c++-header", "kb_torch.h", "-o", "kb_torch.h.gch", *flags], work)
    print(f"{'g++ precompiled header (once per toolchain)':55s} {pch_s:6.2f} s", flush=True)
    gxx_cmd = [tc.cxx, "-c", "binding.cpp", "-o", "gxx.o", *flags, "-include", "kb_torch.h", "-Winvalid-pch"]
    compiles("g++ binding.cpp, precompiled header (kbench today)", gxx_cmd)
    if clang is None:
        print("no clang++ to compare")
        return
    cflags = [*flags, "-Wno-unused-command-line-argument"]

    def clang_cmd(name: str, *extra: str) -> list[str]:
        return [clang, "-c", "binding.cpp", "-o", f"clang_{name}.o", *cflags, "-include-pch", f"kb_{name}.pch", *extra]

    for name, extra in (("plain", []), ("instantiating", ["-fpch-instantiate-templates"])):
        pch = f"kb_{name}.pch"
        s = timed(f"clang pch {name}", [clang, "-x", "c++-header", "kb_torch.h", "-o", pch, *cflags, *extra], work)
        print(f"{f'clang precompiled header, {name}':55s} {s:6.2f} s", flush=True)
        compiles(f"clang binding.cpp, {name} precompiled header", clang_cmd(name))
    split_rows = len(rows)
    for label, cmd in (("g++", gxx_cmd), ("clang, instantiating", clang_cmd("instantiating"))):
        row(f"cold split build (nvcc || {label}, link)", lambda cmd=cmd: split_build(cmd, tc, work))
    if args.trace:
        timed("clang trace", clang_cmd("instantiating", "-ftime-trace", "-ftime-trace-granularity=50000"), work)
        for phase, s in trace_totals(work / "clang_instantiating.json"):
            print(f"    {phase:51s} {s:6.2f} s")
    base = rows[0][1]
    for label, median, _ in rows[1:split_rows]:
        print(f"g++ / {label}: {base / median:.2f}x")
    print(f"cold split build, g++ / clang: {rows[split_rows][1] / rows[split_rows + 1][1]:.2f}x")
    if args.run:
        check_extension(tc, work)


def check_extension(tc: toolchain.Toolchain, work: Path) -> None:
    """The clang-compiled binding.o linked with the nvcc kernel.o, loaded and called: right answer, and a failed
    TORCH_CHECK crosses into Python as RuntimeError."""
    import torch  # the GPU check only: the timing rows above need no torch import

    timed("nvcc kernel.cu", [tc.nvcc, "-c", "kernel.cu", "-o", "kernel.o", *tc.nvcc_kernel_flags()], work)
    timed("link", [tc.cxx, "kernel.o", "clang_instantiating.o", "-o", f"{BINDING_MODULE}.so", *tc.link_flags()], work)
    spec = importlib.util.spec_from_file_location(BINDING_MODULE, work / f"{BINDING_MODULE}.so")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x, y = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
    ok = torch.allclose(mod.forward(x, y, 0.5), 0.5 * x + y)
    try:
        mod.forward(x.cpu(), y, 0.5)
        crossed = "no error"
    except RuntimeError as e:
        crossed = f"RuntimeError: {str(e).splitlines()[0]}"
    print(f"clang-compiled binding: result {'correct' if ok else 'WRONG'}; CPU input -> {crossed}")


if __name__ == "__main__":
    main()
