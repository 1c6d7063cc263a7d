"""Compile stage: turn a candidate into an importable torch extension, with a cache keyed by source + toolchain.

Paths by format:
- native (kernel.cu + binding.cpp [+ .cuh/.h]): nvcc compiles kernel.cu without torch headers while g++
  compiles binding.cpp in parallel against a precompiled <torch/extension.h>; then one link.
- robust-kbench (one .cu with torch headers and PYBIND11_MODULE): nvcc with torch's flags, then link. Slow:
  nvcc cannot use a GCC precompiled header.
- kernelbench (.py with ModelNew): the file builds its kernels with load_inline when imported, so the compile
  stage imports it in a sandboxed child without a GPU (`_build_kernelbench`); the builds land in
  kernelbench_extensions_dir(), which the evaluation's import reuses (engine.harness.kernelbench.prebuilt). A
  failed build is a compile failure with the compiler's message. The C++ half of each load_inline build uses the
  precompiled header, and the first failed compile ends the build (engine/harness/kernelbench/fast.py), so a
  typo is reported in seconds rather than after every other compile of the extension has finished.

Cache: cache_root/builds/<toolchain key>/<source hash>/ holds result.json, build.log, src/ and the .so. An
entry is built in a temp dir and renamed into place, so a killed build never leaves half an entry.
Deterministic failures (compile and link errors) are cached too; timeouts and machine trouble are not.
Below it, the native build keeps kernel.o and binding.o by content and flags (engine/harness/object_cache.py):
a candidate whose binding.cpp (and headers) match an earlier one's reuses that binding.o and costs an nvcc run
and a link. So that binding.o does not depend on the candidate's module name, binding.cpp is compiled with
TORCH_EXTENSION_NAME=kbench_binding and the link adds PyInit_kb_<source hash> as an alias of its PyInit: each
candidate still imports as its own module, kb_<source hash>, from its own file, kb_<source hash>.so.
Compilers run jailed (engine/jail: they read the toolchain and the candidate, write only the build folder).
`load_module` runs inside the runner.

One job to a module: this one holds the builds (build_candidate, the single .cu and KernelBench paths) and the
loader; the native split build is in build_native.py, BuildResult in build_result.py, the cache (entries,
result.json, publishing) in build_cache.py, the precompiled header in pch.py, compiler-log diagnosis and the
link checks in build_diagnose.py, the compiler step itself in build_steps.py. The names callers used from here
still work.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

from engine.candidates import Candidate
from engine.harness.build.cache import (_CACHEABLE_FAILURES, _clean_stale_tmp, _publish, _read_entry, copy_private,
                                        entry_dir, kernelbench_extensions_dir, makedirs_private, private_root)
from engine.harness.build.diagnose import _check_export, _check_link, _diagnose, _render_log, inside_without_links
from engine.harness.build.native import _build_native
from engine.harness.build.result import BuildResult
from engine.harness.build.steps import StepResult, _Failed, _module_name, _vendor_link, compile_jail, run_tool
from engine.harness.build.triton import build_triton, child_result
from engine.harness.kernelbench.child_types import CompileRequest
from engine.harness.kernelbench.prebuilt import write_manifest
from engine.harness.pch import PchInfo, ensure_pch
from engine.harness.toolchain import Toolchain
from engine.jail.limits import IMPORT
from engine.procs import ChildOutcome, run_child

DEFAULT_TIMEOUT_S = 300.0


def build_candidate(candidate: Candidate, cache_root: Path, toolchain: Toolchain,
                    timeout_s: float = DEFAULT_TIMEOUT_S, force: bool = False) -> BuildResult:
    """Build (or fetch from the cache) the candidate's extension. Never raises for a bad candidate:
    the result says ok=False with a one-paragraph error. `force` rebuilds and replaces a cached entry."""
    start = time.monotonic()
    cache_root = Path(cache_root)
    private_root(cache_root)
    h = candidate.source_hash
    key = toolchain.key()
    entry = entry_dir(cache_root, toolchain, candidate)
    if not force and (hit := _read_entry(entry)) is not None:
        hit.cache_hit = True
        hit.seconds = time.monotonic() - start
        return hit

    parent = entry.parent
    makedirs_private(parent)
    _clean_stale_tmp(parent)
    work = parent / f".tmp-{h}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    src = work / "src"
    module_name = f"kb_{h}"
    so_name: str | None = f"kb_{h}.so"
    steps: list[StepResult] = []
    timings: dict[str, float] = {}
    pch_used: bool | None = None
    try:
        _check_paths(candidate)
        candidate.write_to(src)
        # The .so is named after the source hash whatever the module is called: the runner stages it next to
        # the timing helper's .so by file name, so a module name of the helper's must not overwrite its file.
        if candidate.format == "native":
            module_name = _module_name(candidate.files["binding.cpp"], module_name)
            pch_used = _build_native(candidate, cache_root, toolchain, work, src, so_name, module_name,
                                     start + timeout_s, steps, timings, reuse_objects=not force)
        elif candidate.format == "robust-kbench":
            main = candidate.main_file
            module_name = _module_name(candidate.files[main], module_name)
            _build_single_cu(main, toolchain, work, src, so_name, module_name, start + timeout_s, steps, timings)
            _check_export(work / so_name, module_name, steps, timings)
        elif candidate.format == "kernelbench":
            module_name, so_name = None, None
            _build_kernelbench(candidate, cache_root, toolchain, src, start + timeout_s, steps, timings)
        elif candidate.format == "triton":
            so_name = None
            build_triton(candidate, module_name, toolchain, src, start + timeout_s, steps, timings)
        elif candidate.format == "kernel-only":
            raise _Failed("invalid", "a kernel-only candidate (kernel.cu without binding.cpp) builds with the binding "
                                     "its task generates: materialise it for the task first "
                                     "(engine.tasks.glue.generated.materialise; evaluate() and `kbench eval` do)")
        else:
            raise _Failed("invalid", f"unknown candidate format {candidate.format!r}")
        failure, error = None, None
    except _Failed as f:
        failure, error = f.kind, f.error
    except OSError as exc:  # disk full, permissions: the machine's problem, not the candidate's
        failure, error = "internal", f"build directory {work}: {exc}"

    ok = failure is None
    result = BuildResult(
        ok=ok, format=candidate.format, source_hash=h, module_name=module_name if ok else None,
        so_path=(entry / so_name) if ok and so_name else None, seconds=0.0, log=_render_log(steps, work),
        error=error, failure=failure, steps=timings, pch_used=pch_used, toolchain_key=key)
    if failure is not None and failure not in _CACHEABLE_FAILURES:
        shutil.rmtree(work, ignore_errors=True)
        result.note = "not cached: a timeout or machine problem may not recur"
        result.seconds = time.monotonic() - start
        return result
    try:
        _publish(result, work, entry, steps, force)
    except OSError as exc:
        shutil.rmtree(work, ignore_errors=True)
        result.entry_dir, result.so_path, result.ok = None, None, False
        result.failure, result.error = "internal", f"cannot store the build in {entry.parent}: {exc}"
        result.seconds = time.monotonic() - start
        return result
    final = _read_entry(entry) or result  # a concurrent builder may have won the race: use its entry
    final.seconds = time.monotonic() - start
    final.cache_hit = False
    return final


def _check_paths(candidate: Candidate) -> None:
    for rel in candidate.files:
        p = Path(rel)
        if p.is_absolute() or ".." in p.parts or not rel.strip():
            raise _Failed("invalid", f"candidate file name {rel!r} must be a relative path inside the candidate")


def _build_single_cu(main: str, tc: Toolchain, work: Path, src: Path, so_name: str, module_name: str,
                     deadline: float, steps: list[StepResult], timings: dict[str, float]) -> None:
    obj = work / "main.o"
    jail = compile_jail(work, toolchain=tc)
    step = run_tool([tc.nvcc, "-c", main, "-o", str(obj), *tc.nvcc_torch_flags(module_name)],
                    src, deadline - time.monotonic(), f"nvcc {main}", jail)
    steps.append(step)
    timings["nvcc"] = round(step.seconds, 3)
    if not step.ok:
        raise _Failed(*_diagnose(step, src, {main: ""}))
    link = run_tool([tc.cxx, "main.o", "-o", so_name, *tc.link_flags(), *_vendor_link({main: (src / main).read_text(errors="replace")}, tc)], work,
                    max(deadline - time.monotonic(), 30.0), "link", jail)
    steps.append(link)
    timings["link"] = round(link.seconds, 3)
    _check_link(link, work, {main: ""}, objects={})


_BUILDS_EXTENSION = re.compile(r"load_inline|cpp_extension")
_NO_GPU_AT_IMPORT = ("CUDA", "cuda", "NVIDIA", "driver", "device")


def _build_kernelbench(candidate: Candidate, cache_root: Path, tc: Toolchain, src: Path, deadline: float,
                       steps: list[StepResult], timings: dict[str, float]) -> None:
    """Import the ModelNew file in a sandboxed child with no GPU: its load_inline/load calls compile its kernels
    into kernelbench_extensions_dir(), with this toolchain's arch list. The evaluation's runner imports a copy of
    that folder and replays torch's versioner state from the manifest written here, so it does not build again.
    A build that fails raises _Failed with the compiler's message."""
    main = candidate.main_file
    text = candidate.files[main]
    try:
        ast.parse(text, filename=main)
    except SyntaxError as exc:
        raise _Failed("compile", f"{main}:{exc.lineno}: Python syntax error: {exc.msg}.") from None
    if not _BUILDS_EXTENSION.search(text):
        steps.append(StepResult("import", (), 0, "no load_inline / cpp_extension call: nothing to compile", 0.0))
        return
    ext_dir = kernelbench_extensions_dir(cache_root, candidate)
    # The import runs the candidate's Python: jailed like a compiler (it reads the toolchain and its source, writes
    # only its own folder), bounded (engine/jail/limits.py IMPORT), in a folder of its own outside the user's cache
    # (so that it can run as uid 65534 where the toolchain allows), killed with everything it started when it
    # ends. Its builds are copied into the cache afterwards, links left out.
    with tempfile.TemporaryDirectory(prefix="kbench-import-") as tmp:
        box = Path(tmp)
        os.chmod(box, 0o711)
        (box / "src").mkdir(mode=0o755)
        shutil.copyfile(src / main, box / "src" / main)
        os.chmod(box / "src" / main, 0o644)
        built = box / "ext"
        built.mkdir(mode=0o700)
        pch = ensure_pch(cache_root, tc)          # shared work: its time does not count against this build
        if pch.seconds > 0.05 or pch.built:
            timings["pch"] = round(pch.seconds, 3)
        header = _pch_for_import(pch, box / "pch", steps)
        request = CompileRequest(py_path=str(box / "src" / main), module_name=f"kb_modelnew_{candidate.source_hash}",
                                 pch_header=str(header or ""), pch_flags=tuple(tc.host_flags(None)) if header else ())
        # CXX: torch builds main.cpp with the toolchain's g++, the one the precompiled header was built by;
        # CUDA_HOME: the toolkit kbench found (engine.cuda_home), not torch's guess from the nvcc on PATH
        env = {"TORCH_EXTENSIONS_DIR": str(built), "TORCH_CUDA_ARCH_LIST": ";".join(tc.archs),
               "CUDA_VISIBLE_DEVICES": "", "HOME": str(built), "TMPDIR": str(built), "CXX": tc.cxx,
               "CUDA_HOME": tc.cuda_home}
        timeout = max(deadline + pch.seconds - time.monotonic(), 5.0)
        # a result file that is not a JSON object (not text, not JSON, a list) reads as {}: an import that did not
        # finish (engine.procs.await_child)
        outcome = run_child("engine.harness.kernelbench.compile", request.to_json(), timeout_s=timeout,
                            extra_env=env, jail=compile_jail(built, [box / "src", box / "pch"], tc, IMPORT))
        _check_import(outcome, candidate, built, ext_dir, src, timeout, steps, timings)


def _pch_for_import(pch: PchInfo, folder: Path, steps: list[StepResult]) -> Path | None:
    """The precompiled header, linked into the import's own folder (read-only to it): the cache it lives in is
    closed to the uid the import may run as. A link, not a copy (the .gch is most of a GB); where the two
    folders are on different file systems, the import builds without it. The header's path in `folder`."""
    folder.mkdir(mode=0o755)
    if pch.header is None:
        if pch.error:
            steps.append(StepResult("pch", (), 0, pch.error, pch.seconds))
        return None
    gch = Path(f"{pch.header}.gch")
    try:
        for f in (pch.header, gch):
            os.link(f, folder / f.name)
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(mode=0o755, exist_ok=True)
        steps.append(StepResult("pch", (), 0, f"the precompiled header is not used for load_inline: cannot link "
                                              f"{gch} into {folder} ({exc})", 0.0))
        return None
    return folder / pch.header.name


def _check_import(outcome: ChildOutcome, candidate: Candidate, built: Path, ext_dir: Path, src: Path,
                  timeout: float, steps: list[StepResult], timings: dict[str, float]) -> None:
    """Read the import child's result strictly (it ran the candidate's code) and raise _Failed for a failed
    import or build; else keep its builds in the cache (`ext_dir`) with the manifest the runner replays."""
    main = candidate.main_file
    text = candidate.files[main]
    res = child_result(outcome, main, timings)
    calls = res.extensions
    output = "\n".join(f"{c.via} {c.name}: {'ok' if c.ok else c.error}" for c in calls)
    broken = outcome.returncode != 0 or res.import_error or any(not c.ok for c in calls)
    step = StepResult(f"import {main}", (sys.executable, "-m", "engine.harness.kernelbench.compile"),
                      (outcome.returncode or 1) if broken else 0,
                      (output + "\n" + (res.import_error or "")).strip() or outcome.output_tail,
                      outcome.seconds, outcome.timed_out, timeout, outcome.report)
    steps.append(step)
    if outcome.timed_out:
        raise _Failed(*_diagnose(step, src, {main: text}))
    failed = [c for c in calls if not c.ok]
    if failed:
        c = failed[0]
        where = built / c.name
        if not inside_without_links(where, built):
            where = built   # a name the candidate chose to point elsewhere: no source line is quoted
        build = StepResult(f"{c.via} {c.name}", (), 1, c.error or "", step.seconds)
        kind, msg = _diagnose(build, where, {"cuda.cu": "", "main.cpp": ""})
        raise _Failed(kind, msg + f" (the extension {c.name!r} that {main} builds at import)")
    if not res.finished:
        raise _Failed("internal", f"the import of {main} did not finish: {outcome.describe_crash()}")
    err = res.import_error
    if err and not (calls and not res.cuda_available and any(w in err for w in _NO_GPU_AT_IMPORT)):
        raise _Failed("compile", f"{main} raised on import, so ModelNew cannot be loaded: {err}")
    copy_private(built, ext_dir)
    write_manifest(ext_dir, res.versions, built_in=built)


# ---------------------------------------------------------------------------- loading (sandbox child)
def load_module(result: BuildResult | dict[str, Any]) -> ModuleType:
    """Import a built extension. Imports torch first: the .so links libc10/libtorch*/libcudart by soname
    and carries no rpath, so they must already be loaded (as for any torch extension)."""
    if isinstance(result, dict):
        result = BuildResult.from_json(result)
    if not result.ok or result.so_path is None or result.module_name is None:
        raise ImportError(f"candidate {result.source_hash} has no built module: "
                          f"{result.error or result.note or 'not built'}")
    return load_extension(Path(result.so_path), result.module_name)


def load_extension(so_path: Path, name: str) -> ModuleType:
    """Import a built .so under its module name; undefined symbols are explained, not just reported."""
    import torch  # noqa: F401  # lazy: only a caller that imports the built extension needs torch

    path = str(so_path)
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) == path:
        return loaded
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_loader(name, loader, origin=path)
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as exc:
        raise ImportError(_explain_import_error(str(exc), name)) from exc
    sys.modules[name] = module
    return module


def _explain_import_error(text: str, name: str) -> str:
    if m := re.search(r"undefined symbol: (\S+)", text):
        sym = m.group(1)
        demangled = sym
        if filt := shutil.which("c++filt"):
            try:
                demangled = subprocess.run([filt, sym], capture_output=True, text=True, timeout=10).stdout.strip()
            except (OSError, subprocess.SubprocessError):
                pass
        return (f"{name}: the extension uses `{demangled}`, which neither it nor the loaded torch libraries "
                "define (a launcher declared in binding.cpp but not defined in kernel.cu, or defined with "
                f"other parameter types). Loader said: {text}")
    if "module export function" in text or "PyInit" in text:
        return (f"{name}: no PyInit_{name} in the extension; the binding needs "
                f"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m). Loader said: {text}")
    return f"{name}: cannot import the extension: {text}"
