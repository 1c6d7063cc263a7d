"""Compile-time benchmark: kbench's split build vs torch's load_inline, plus cache hits.

Run on the GPU machine (archs come from the visible GPU unless TORCH_CUDA_ARCH_LIST is set):

    CUDA_HOME=/usr/local/cuda python scripts/bench_compile.py --repeats 3 [--json out.json]

Rows (each a median over --repeats fresh builds; every build gets unique source so nothing is cached):
- split (cold, PCH built): kernel.cu via nvcc || binding.cpp via g++ with the precompiled torch header, link.
- kernel.cu changed, binding.o reused: a new kernel.cu with the binding of the last split build, so binding.o
  comes from the object cache (engine/harness/object_cache.py): an nvcc run and a link.
- cache hit: build_candidate on an already built candidate.
- load_inline (torch headers in .cu): the same kernel and glue as one .cu, built by
  torch.utils.cpp_extension.load_inline in a fresh build directory (what KernelBench candidates do).
- single .cu (kbench robust-kbench path): the same .cu through build_candidate (nvcc with torch headers).
- kernel-only (--task, default llama_rmsnorm forward, with tests/fixtures/kernel_only/llama_rmsnorm_forward): a
  kernel.cu alone, materialised with the binding.cpp its task's signature generates (engine/tasks/glue/generated.py):
  "generated glue, both cold" compiles both objects (the split build of that candidate); "glue object warm" is a new
  kernel.cu each time with the glue's binding.o compiled beforehand (engine/harness/glue_warm.py, timed as its own
  row): everything cold but the glue object, i.e. the first candidate of a session after the warm-up.
The one-off PCH build time is reported separately.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.candidates import Candidate, load_candidate  # noqa: E402
from engine.harness.build.stage import build_candidate
from engine.harness.pch import ensure_pch  # noqa: E402
from engine.harness import nvml  # noqa: E402
from engine.harness.glue_warm import prebuild_glue  # noqa: E402
from engine.harness.toolchain import detect  # noqa: E402
from engine.tasks.glue.generated import materialise  # noqa: E402
from engine.tasks.loader import load_task  # noqa: E402


def _nonce(files: dict[str, str], tag: str) -> dict[str, str]:
    """Append a unique comment to every compiled file: a new source hash, so the build is cold."""
    return {rel: text + (f"\n// bench nonce {tag}\n" if rel.endswith((".cu", ".cpp")) else "")
            for rel, text in files.items()}


def single_cu_source(native: Candidate) -> str:
    """The native candidate as one .cu with torch headers: local headers inlined, kernel then glue."""
    headers = {rel: text.replace("#pragma once", "") for rel, text in native.files.items()
               if rel.endswith((".h", ".cuh"))}

    def inline(text: str) -> str:
        return re.sub(r'^\s*#include\s+"([^"]+)"\s*$', lambda m: headers.get(m.group(1), m.group(0)), text,
                      flags=re.MULTILINE)

    binding = re.sub(r"^\s*#include\s+<[^>]+>\s*$", "", native.files["binding.cpp"], flags=re.MULTILINE)
    return ("#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n#include <c10/cuda/CUDAGuard.h>\n"
            + inline(native.files["kernel.cu"]) + "\n" + inline(binding))


def bench_split(native: Candidate, cache: Path, tc, repeats: int) -> tuple[list[float], list[dict], Candidate]:
    times, steps, last = [], [], native
    for i in range(repeats):
        cand = Candidate("native", _nonce(native.files, f"split-{i}-{uuid.uuid4().hex}"), native.name)
        res = build_candidate(cand, cache, tc)
        if not res.ok:
            raise SystemExit(f"split build failed: {res.error}\n{res.log}")
        if res.pch_used is not True:
            print(f"warning: split build {i} did not use the PCH (pch_used={res.pch_used})", file=sys.stderr)
        times.append(res.seconds)
        steps.append(res.steps)
        last = cand
    return times, steps, last


def bench_kernel_only(last: Candidate, cache: Path, tc, repeats: int,
                      what: str = "kernel") -> tuple[list[float], list[dict]]:
    """A new kernel.cu each time with the binding (and headers) of `last`: binding.o comes from the object cache.
    The seconds and steps of each build."""
    times, steps = [], []
    for i in range(repeats):
        files = dict(last.files)
        files["kernel.cu"] += f"\n// bench nonce {what}-{i}-{uuid.uuid4().hex}\n"
        res = build_candidate(Candidate("native", files, last.name), cache, tc)
        if not res.ok:
            raise SystemExit(f"{what} build failed: {res.error}\n{res.log}")
        if "cxx (cached object)" not in res.steps:
            print(f"warning: {what} build {i} compiled binding.cpp again ({res.steps})", file=sys.stderr)
        times.append(res.seconds)
        steps.append(res.steps)
    return times, steps


def bench_glue(kernel_only: Candidate, task_ref: str, direction: str, cache: Path, tc,
               repeats: int) -> tuple[list[float], list[float], float, list[dict]]:
    """The kernel-only path: (both objects cold, glue object warm, the glue prebuild's seconds, steps of the warm
    builds). Each build gets a new kernel.cu; the cold ones a new binding.cpp too (the generated text plus a nonce)."""
    task = load_task(task_ref)
    native = materialise(kernel_only, task, direction)
    cold = []
    for i in range(repeats):
        files = _nonce(native.files, f"glue-cold-{i}-{uuid.uuid4().hex}")
        res = build_candidate(Candidate("native", files, native.name), cache, tc)
        if not res.ok:
            raise SystemExit(f"kernel-only (cold) build failed: {res.error}\n{res.log}")
        cold.append(res.seconds)
    pre = prebuild_glue(task, direction, cache, tc)
    if pre.status not in ("compiled", "cached"):
        raise SystemExit(f"glue prebuild: {pre.status}: {pre.detail}")
    warm, steps = bench_kernel_only(native, cache, tc, repeats, what="kernel-only (glue warm)")
    return cold, warm, pre.seconds, steps


def bench_hits(cand: Candidate, cache: Path, tc, repeats: int) -> list[float]:
    times = []
    for _ in range(max(repeats, 5)):
        res = build_candidate(cand, cache, tc)
        assert res.cache_hit, "expected a cache hit"
        times.append(res.seconds)
    return times


def bench_load_inline(source: str, tc, repeats: int, work: Path) -> list[float]:
    """Each build in a child process: a fresh interpreter, as a sandbox would have, and no in-process cache."""
    from torch.utils import cpp_extension

    code = (
        "import json, sys, time, torch\n"
        "from torch.utils.cpp_extension import load_inline\n"
        "src, name, bdir = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]\n"
        "t = time.perf_counter()\n"
        "m = load_inline(name, cpp_sources='', cuda_sources=src, build_directory=bdir, verbose=False,\n"
        "                extra_include_paths=json.loads(sys.argv[4]))\n"
        "print(time.perf_counter() - t)\n"
    )
    env = dict(os.environ, TORCH_CUDA_ARCH_LIST=";".join(tc.archs), CUDA_HOME=tc.cuda_home)
    # the toolchain's extra header dirs (pip nvidia-* wheels when the toolkit lacks cuSPARSE/cuBLAS headers)
    torch_dirs = set(cpp_extension.include_paths(device_type="cuda"))
    extra = [d for d in tc.include_dirs if d not in torch_dirs]
    times = []
    for i in range(repeats):
        name = f"bench_li_{i}_{uuid.uuid4().hex[:8]}"
        bdir = work / name
        bdir.mkdir(parents=True)
        src = work / f"{name}.cu"
        src.write_text(source + f"\n// bench nonce {name}\n")
        proc = subprocess.run([sys.executable, "-c", code, str(src), name, str(bdir), json.dumps(extra)],
                              capture_output=True, text=True, env=env, timeout=1800)
        if proc.returncode != 0:
            raise SystemExit(f"load_inline build failed:\n{proc.stderr[-4000:]}")
        times.append(float(proc.stdout.strip().splitlines()[-1]))
    return times


def bench_single_cu(source: str, cache: Path, tc, repeats: int) -> list[float]:
    times = []
    for i in range(repeats):
        cand = Candidate("robust-kbench", {"forward.cu": source + f"\n// bench nonce single-{i}-{uuid.uuid4().hex}\n"})
        res = build_candidate(cand, cache, tc, timeout_s=1800)
        if not res.ok:
            raise SystemExit(f"single .cu build failed: {res.error}\n{res.log}")
        times.append(res.seconds)
    return times


def _gpu_name() -> str:
    """The first GPU's name (NVML index 0, nvidia-smi's first row); "none" where NVML sees no GPU (no pynvml, no
    driver), "unknown" where it sees one but cannot name it."""
    name = nvml.gpu_name(0)
    if name:
        return name
    return "unknown" if nvml.gpu_count() else "none"


def _fmt(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 1 else f"{seconds:.1f} s"


def _row(label: str, xs: list[float]) -> dict:
    return {"path": label, "runs": len(xs), "median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs),
            "all_s": [round(x, 5) for x in xs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--candidate", type=Path, default=REPO / "tests" / "fixtures" / "native",
                    help="a native candidate folder (kernel.cu + binding.cpp)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache", type=Path, default=None, help="cache root (default: a fresh temp dir)")
    ap.add_argument("--skip-load-inline", action="store_true")
    ap.add_argument("--skip-single-cu", action="store_true")
    ap.add_argument("--kernel-only", type=Path,
                    default=REPO / "tests" / "fixtures" / "kernel_only" / "llama_rmsnorm_forward",
                    help="a kernel-only candidate (kernel.cu without binding.cpp) for --task")
    ap.add_argument("--task", default="llama_rmsnorm", help="the task of --kernel-only (default llama_rmsnorm)")
    ap.add_argument("--direction", default="forward", choices=["forward", "backward"])
    ap.add_argument("--skip-kernel-only", action="store_true", help="skip the kernel-only (generated glue) rows")
    ap.add_argument("--json", type=Path, default=None, help="also write the JSON report here")
    ap.add_argument("--host-opt", default=None, help="override the binding's optimisation level (e.g. -O2) for an A/B")
    args = ap.parse_args()

    tc = detect()
    if args.host_opt:
        import dataclasses
        tc = dataclasses.replace(tc, host_opt=args.host_opt)
    native = load_candidate(args.candidate)
    tmp = Path(tempfile.mkdtemp(prefix="kbench-bench-"))
    cache = args.cache or tmp / "cache"
    print(f"toolchain: {tc.describe()}", file=sys.stderr)

    t0 = time.monotonic()
    pch = ensure_pch(cache, tc)
    pch_s = time.monotonic() - t0
    if pch.header is None:
        print(f"warning: no PCH: {pch.error}", file=sys.stderr)

    rows, extra = [], {}
    split_times, split_steps, last = bench_split(native, cache, tc, args.repeats)
    rows.append(_row("split kernel.cu + binding.cpp (cold, PCH built)", split_times))
    extra["split_steps"] = split_steps
    reuse_times, _ = bench_kernel_only(last, cache, tc, args.repeats)
    rows.append(_row("kernel.cu changed, binding.o from the object cache", reuse_times))
    rows.append(_row("cache hit", bench_hits(last, cache, tc, args.repeats)))
    if not args.skip_kernel_only:
        ko = load_candidate(args.kernel_only)
        if ko.format != "kernel-only":
            raise SystemExit(f"{args.kernel_only}: a {ko.format} candidate, not kernel-only (kernel.cu alone)")
        cold, warm, pre_s, warm_steps = bench_glue(ko, args.task, args.direction, cache, tc, args.repeats)
        rows.append(_row(f"kernel-only {args.task} {args.direction}: generated glue, both cold", cold))
        rows.append(_row("glue prebuild (once per task signature and toolchain)", [pre_s]))
        rows.append(_row(f"kernel-only {args.task} {args.direction}: glue object warm, kernel.cu cold", warm))
        extra["kernel_only_steps"] = warm_steps
    source = single_cu_source(native)
    if not args.skip_load_inline:
        rows.append(_row("load_inline, torch headers in .cu", bench_load_inline(source, tc, args.repeats, tmp / "li")))
    if not args.skip_single_cu:
        rows.append(_row("single .cu via build_candidate (robust-kbench)", bench_single_cu(source, cache, tc, args.repeats)))

    report = {
        "toolchain": tc.to_json(), "gpu": _gpu_name(), "cpu_count": os.cpu_count(), "host": platform.node(),
        "candidate": str(args.candidate), "pch_build_s": round(pch_s, 2), "pch_built_here": pch.built,
        "rows": rows, **extra,
    }
    print(f"\nCompile times; GPU: {report['gpu']}, {report['cpu_count']} CPUs, archs {';'.join(tc.archs)}, "
          f"torch {tc.torch_version}, nvcc {tc.nvcc_version}, {Path(tc.cxx).name} {tc.cxx_version}\n")
    print("| path | runs | median | min | max |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['path']} | {r['runs']} | {_fmt(r['median_s'])} | {_fmt(r['min_s'])} | {_fmt(r['max_s'])} |")
    print(f"\nPCH build (once per toolchain): {pch_s:.1f} s{'' if pch.built else ' (already there)'}\n")
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)
    if args.cache is None:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
