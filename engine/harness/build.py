"""Compile stage: turn a candidate into an importable torch extension, with a cache keyed by source + toolchain.

Paths by format:
- native (kernel.cu + binding.cpp [+ .cuh/.h]): nvcc compiles kernel.cu without torch headers while g++
  compiles binding.cpp in parallel against a precompiled <torch/extension.h>; then one link.
- robust-kbench (one .cu with torch headers and PYBIND11_MODULE): nvcc with torch's flags, then link. Slow:
  nvcc cannot use a GCC precompiled header.
- kernelbench (.py with ModelNew): the file builds its kernels with load_inline when imported, so the compile
  stage imports it in a sandboxed child without a GPU (`_build_kernelbench`); the builds land in
  kernelbench_extensions_dir(), where the evaluation's import finds them up to date. A failed build is a compile
  failure with the compiler's message.

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
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from engine.candidates import Candidate
from engine.harness import object_cache
from engine.harness.toolchain import PCH_HEADERS, Toolchain
from engine.jail import JailSpec
from engine.jail import command as jailed
from engine.procs import file_lock, kill_group

DEFAULT_TIMEOUT_S = 300.0
# TORCH_EXTENSION_NAME for every binding.cpp, so that binding.o is the same whatever candidate it is linked into
# (and can come from the object cache); the link aliases PyInit_<module name> to PyInit_<this>.
BINDING_MODULE = "kbench_binding"
PCH_TIMEOUT_S = 900.0      # the PCH is built once per toolchain; a candidate's timeout does not apply to it
LOG_LIMIT = 12_000         # characters of compiler output kept in BuildResult.log (head-heavy: errors come first)
STALE_TMP_S = 6 * 3600     # leftovers of killed builds older than this are removed on the next miss
PCH_BASENAME = "kbench_torch.h"

# Variables a compiler may legitimately need. Everything else (API keys, tokens, NVCC_APPEND_FLAGS and other
# flag injectors that would change object code behind the cache key's back) is dropped.
ENV_ALLOWLIST = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR", "TMP", "TEMP",
                 "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH")

FailureKind = Literal["compile", "link", "timeout", "internal", "invalid"]
_CACHEABLE_FAILURES = ("compile", "link", "invalid")  # same source, same toolchain -> same error


# ---------------------------------------------------------------------------- results
@dataclass
class BuildResult:
    ok: bool
    format: str
    source_hash: str
    module_name: str | None
    so_path: Path | None
    seconds: float                                          # wall time of this call (lookup time on a hit)
    cache_hit: bool = False
    log: str = ""                                           # compiler output, trimmed and de-noised
    error: str | None = None                                # one paragraph: file:line and cause
    failure: FailureKind | None = None
    note: str | None = None
    steps: dict[str, float] = field(default_factory=dict)   # seconds per step of the build that made it;
                                                            # "nvcc/cxx (cached object)": 0.0 for a reused object
    pch_used: bool | None = None                            # native only: did g++ accept the PCH (None: no
                                                            # PCH, or binding.o came from the object cache)
    toolchain_key: str = ""
    entry_dir: Path | None = None                           # the cache entry (src/, build.log), if stored

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["so_path"] = str(self.so_path) if self.so_path else None
        d["entry_dir"] = str(self.entry_dir) if self.entry_dir else None
        return d

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "BuildResult":
        d = dict(obj)
        d["so_path"] = Path(d["so_path"]) if d.get("so_path") else None
        d["entry_dir"] = Path(d["entry_dir"]) if d.get("entry_dir") else None
        return cls(**d)


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


@dataclass(frozen=True)
class PchInfo:
    header: Path | None       # pass as `-include header`; g++ picks up header.gch next to it
    built: bool               # this call compiled it (else it existed or another process built it)
    seconds: float            # time spent here, waiting on another builder's lock included
    error: str | None = None  # why there is no PCH (the build then goes on without one)


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
    from engine.jail.profiles import compiler_spec
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


# ---------------------------------------------------------------------------- precompiled header
def pch_dir(cache_root: Path, toolchain: Toolchain) -> Path:
    return Path(cache_root) / "pch" / toolchain.key()


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


# ---------------------------------------------------------------------------- cache layout
def builds_dir(cache_root: Path, toolchain: Toolchain) -> Path:
    return Path(cache_root) / "builds" / toolchain.key()


def entry_path(cache_root: Path, toolchain_key: str, source_hash: str) -> Path:
    """Where a build of `source_hash` by the toolchain with `toolchain_key` lives in the cache."""
    return Path(cache_root) / "builds" / toolchain_key / source_hash


def entry_dir(cache_root: Path, toolchain: Toolchain, candidate: Candidate) -> Path:
    return entry_path(cache_root, toolchain.key(), candidate.source_hash)


def kernelbench_extensions_dir(cache_root: Path, candidate: Candidate, toolchain: Toolchain | None = None) -> Path:
    """TORCH_EXTENSIONS_DIR for a KernelBench candidate's load_inline, one per source hash (and toolchain)."""
    key = toolchain.key() if toolchain is not None else "any"
    return Path(cache_root) / "torch_extensions" / key / candidate.source_hash


def _read_entry(entry: Path) -> BuildResult | None:
    try:
        res = BuildResult.from_json(json.loads((entry / "result.json").read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None
    res.entry_dir = entry
    if res.so_path is not None:
        res.so_path = entry / res.so_path.name  # the entry was renamed into place after the build
        if not res.so_path.is_file():
            return None
    return res


def _clean_stale_tmp(parent: Path) -> None:
    now = time.time()
    try:
        with os.scandir(parent) as it:
            for e in it:
                if e.name.startswith((".tmp-", ".old-")) and now - e.stat().st_mtime > STALE_TMP_S:
                    shutil.rmtree(e.path, ignore_errors=True)
    except OSError:
        pass


# ---------------------------------------------------------------------------- the build
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


def build_candidate(candidate: Candidate, cache_root: Path, toolchain: Toolchain,
                    timeout_s: float = DEFAULT_TIMEOUT_S, force: bool = False) -> BuildResult:
    """Build (or fetch from the cache) the candidate's extension. Never raises for a bad candidate:
    the result says ok=False with a one-paragraph error. `force` rebuilds and replaces a cached entry."""
    start = time.monotonic()
    cache_root = Path(cache_root)
    h = candidate.source_hash
    key = toolchain.key()
    entry = entry_dir(cache_root, toolchain, candidate)
    if not force and (hit := _read_entry(entry)) is not None:
        hit.cache_hit = True
        hit.seconds = time.monotonic() - start
        return hit

    parent = entry.parent
    parent.mkdir(parents=True, exist_ok=True)
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


def _vendor_link(files: dict[str, str], tc: Toolchain) -> list[str]:
    """The vendor libraries the sources include (engine/harness/vendor_libs.py), as files to link; a library
    that cannot be found is left out, and the link then names its unresolved symbols."""
    from engine.harness.vendor_libs import library_files, libraries_used, search_dirs
    names = libraries_used(files)
    return library_files(names, search_dirs(list(tc.library_dirs)))[0] if names else []


def _check_paths(candidate: Candidate) -> None:
    for rel in candidate.files:
        p = Path(rel)
        if p.is_absolute() or ".." in p.parts or not rel.strip():
            raise _Failed("invalid", f"candidate file name {rel!r} must be a relative path inside the candidate")


@dataclass
class _Object:
    """One object of the split build: how it is compiled, what keys it in the object cache, how this build got it."""
    name: str                         # "kernel.o"
    path: Path                        # in the build folder
    step_name: str                    # "nvcc kernel.cu": also what _diagnose names in an error
    timing: str                       # key in BuildResult.steps: "nvcc" / "cxx"
    keyed: dict[str, bytes]           # the candidate files its key covers (object_cache.keyed_files)
    cmd: list[str] = field(default_factory=list)
    key: str | None = None            # None: not cacheable in this build
    extra_s: float = 0.0              # time granted beyond the deadline (the shared PCH build)
    step: StepResult | None = None
    cached: Path | None = None        # the cache file it was copied from, on a hit

    @property
    def depfile(self) -> Path:
        return self.path.with_suffix(".d")


def _build_native(candidate: Candidate, cache_root: Path, tc: Toolchain, work: Path, src: Path, so_name: str,
                  module_name: str, deadline: float, steps: list[StepResult], timings: dict[str, float],
                  reuse_objects: bool = True) -> bool | None:
    """nvcc kernel.cu || (PCH, then g++ binding.cpp), then link. Either object may come from the object cache
    (engine/harness/object_cache.py) instead; a fresh object is published there once its compile succeeded.
    A link that fails with a cached object compiles that object fresh and links once more before it counts as
    the candidate's failure. Returns whether g++ used the PCH (None: no PCH, or g++ did not run)."""
    tc_key = tc.key()
    jail = compile_jail(work, [pch_dir(cache_root, tc)], tc)
    data = {rel: (src / rel).read_bytes() for rel in candidate.files}
    kernel = _Object("kernel.o", work / "kernel.o", "nvcc kernel.cu", "nvcc",
                     object_cache.keyed_files(data, "kernel.cu"))
    binding = _Object("binding.o", work / "binding.o", "g++ binding.cpp", "cxx",
                      object_cache.keyed_files(data, "binding.cpp"))
    # -MD lists every file each compile read (-MMD would leave out files reached through a header marked
    # `#pragma GCC system_header`): the proof, before publishing, that the key covers them all
    kernel.cmd = [tc.nvcc, "-c", "kernel.cu", "-o", str(kernel.path), *tc.nvcc_kernel_flags(),
                  "-MD", "-MF", str(kernel.depfile)]
    kernel.key = object_cache.object_key("kernel.cu", kernel.keyed, object_cache.key_flags(kernel.cmd), tc_key)

    def obtain(obj: _Object, lookup: bool) -> _Object:
        hit = object_cache.fetch(cache_root, tc_key, obj.key, obj.path) if lookup and obj.key else None
        if hit is not None:
            obj.cached = hit
            obj.step = StepResult(f"{obj.step_name} (cached object)", (), 0,
                                  f"reused objects/{tc_key}/{hit.name}: {obj.name} compiled earlier from the same "
                                  "sources, flags and toolchain", 0.0)
        else:
            obj.cached = None
            obj.step = run_tool(obj.cmd, src, deadline + obj.extra_s - time.monotonic(), obj.step_name, jail)
        return obj

    def prepare_binding() -> tuple[_Object, PchInfo]:
        pch = ensure_pch(cache_root, tc)
        binding.cmd = [tc.cxx, "-c", "binding.cpp", "-o", str(binding.path), *tc.host_flags(BINDING_MODULE)]
        if pch.header is not None:
            # -H lists the headers g++ opens: "! x.gch" = PCH used, "x x.gch" = found but rejected.
            binding.cmd += ["-include", str(pch.header), "-Winvalid-pch", "-H"]
        binding.cmd += ["-MD", "-MF", str(binding.depfile)]
        try:
            binding.key = object_cache.object_key("binding.cpp", binding.keyed,
                                                  object_cache.key_flags(binding.cmd), tc_key,
                                                  object_cache.pch_identity(pch.header))
        except OSError:  # the .gch vanished under us: compile, cache nothing
            binding.key = None
        # the PCH is shared work, not this candidate's: its time does not eat the candidate's budget
        binding.extra_s = pch.seconds
        return obtain(binding, reuse_objects), pch

    with ThreadPoolExecutor(max_workers=2) as pool:
        fk = pool.submit(obtain, kernel, reuse_objects)
        fb = pool.submit(prepare_binding)
        fk.result()
        _, pch = fb.result()
    if pch.seconds > 0.05 or pch.built:
        timings["pch"] = round(pch.seconds, 3)
    _record(kernel, steps, timings)
    _record(binding, steps, timings)
    pch_used = None if pch.header is None or binding.cached else _pch_used(binding.step.output)
    if pch.error:
        steps.append(StepResult("pch", (), 0, pch.error, pch.seconds))
        pch_used = False
    _store_objects((kernel, binding), cache_root, tc_key, src, work, steps)
    _raise_compile_failures((kernel, binding), src, candidate.files)

    link_cmd = [tc.cxx, "kernel.o", "binding.o", "-o", so_name, *tc.link_flags(), *_vendor_link(candidate.files, tc)]
    if module_name != BINDING_MODULE and _declares_extension_name(candidate.files["binding.cpp"]):
        # Python calls PyInit_<the name it imports>: the candidate's own name, an alias of binding.o's entry point.
        # With pybind11's multi-phase init the module takes that name too (its spec's), as it did when the name
        # was compiled in; two candidates sharing a binding.o stay two modules.
        link_cmd.append(f"-Wl,--defsym=PyInit_{module_name}=PyInit_{BINDING_MODULE}")

    def link_and_check() -> None:
        link = run_tool(link_cmd, work, max(deadline - time.monotonic(), 30.0), "link", jail)
        steps.append(link)
        timings["link"] = round(timings.get("link", 0.0) + link.seconds, 3)
        _check_link(link, work, candidate.files, objects={"kernel.o": kernel.path})
        _check_export(work / so_name, module_name, steps, timings)

    try:
        link_and_check()
        return pch_used
    except _Failed:
        reused = [o for o in (kernel, binding) if o.cached is not None]
        if not reused:
            raise
    # The link failed with an object from the cache, which may be the cause (a damaged file): drop it from the
    # cache, compile it fresh and link once more. What fails now fails as it would have without the cache.
    for o in reused:
        object_cache.discard(cache_root, tc_key, o.key)
    (work / so_name).unlink(missing_ok=True)
    names = " and ".join(o.name for o in reused)
    steps.append(StepResult("object cache", (), 0, f"the link failed with cached {names}: removed from the object "
                                                   "cache, compiling again and linking once more", 0.0))
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda o: obtain(o, False), reused))
    for o in reused:
        _record(o, steps, timings)
    if binding in reused and pch.header is not None:
        pch_used = _pch_used(binding.step.output)
    _store_objects(reused, cache_root, tc_key, src, work, steps)
    _raise_compile_failures(reused, src, candidate.files)
    link_and_check()
    return pch_used


def _record(obj: _Object, steps: list[StepResult], timings: dict[str, float]) -> None:
    steps.append(obj.step)
    if obj.cached is not None:
        timings[f"{obj.timing} (cached object)"] = 0.0
    else:
        timings[obj.timing] = round(obj.step.seconds, 3)


def _store_objects(objs: tuple[_Object, ...] | list[_Object], cache_root: Path, tc_key: str, src: Path, work: Path,
                   steps: list[StepResult]) -> None:
    """Publish each object this build compiled successfully, from this (trusted) process, once its dependency
    list shows that it read no file of the build folder that its key leaves out. Failed compiles never."""
    for o in objs:
        if o.cached is not None or o.key is None or o.step is None or not o.step.ok:
            continue
        unkeyed = object_cache.unkeyed_inputs(o.depfile, src, work, o.keyed)
        if unkeyed is None:
            continue  # no dependency list (a compiler without -MD): nothing proved, nothing stored
        if unkeyed:
            steps.append(StepResult("object cache", (), 0, f"{o.name} not stored in the object cache: it reads "
                                    f"{', '.join(unkeyed[:4])}, which its key leaves out", 0.0))
            continue
        object_cache.publish(cache_root, tc_key, o.key, o.path)


def _raise_compile_failures(objs: tuple[_Object, ...] | list[_Object], src: Path, files: dict[str, str]) -> None:
    failures = [o.step for o in objs if o.step is not None and not o.step.ok]
    if failures:
        kind, msg = _diagnose(failures[0], src, files)
        if len(failures) > 1:
            _, other = _diagnose(failures[1], src, files)
            msg += f" Also: {other}"
        raise _Failed(kind, msg)


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
    into kernelbench_extensions_dir(), with this toolchain's arch list (the evaluation passes the same list, so
    its import finds the build up to date). A build that fails raises _Failed with the compiler's message."""
    import ast

    from engine.procs import run_child

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
    ext_dir.mkdir(parents=True, exist_ok=True)
    request = {"py_path": str(src / main), "module_name": f"kb_modelnew_{candidate.source_hash}"}
    env = {"TORCH_EXTENSIONS_DIR": str(ext_dir), "TORCH_CUDA_ARCH_LIST": ";".join(tc.archs),
           "CUDA_VISIBLE_DEVICES": "", "HOME": str(ext_dir), "TMPDIR": str(ext_dir)}
    timeout = max(deadline - time.monotonic(), 5.0)
    # The import runs the candidate's Python: in the compilers' jail (reads the toolchain and its source,
    # writes only its extensions folder), so what runs at import time reaches nothing of the user's.
    outcome = run_child("engine.harness.kernelbench_compile", request, timeout_s=timeout, extra_env=env,
                        jail=compile_jail(ext_dir, [src], tc))
    timings["import"] = round(outcome.seconds, 3)
    res = outcome.result
    calls = res.get("extensions") or []
    output = "\n".join(f"{c.get('via')} {c.get('name')}: {'ok' if c.get('ok') else c.get('error')}"
                       for c in calls)
    broken = outcome.returncode != 0 or res.get("import_error") or any(not c.get("ok") for c in calls)
    step = StepResult(f"import {main}", (sys.executable, "-m", "engine.harness.kernelbench_compile"),
                      (outcome.returncode or 1) if broken else 0,
                      (output + "\n" + (res.get("import_error") or "")).strip() or outcome.output_tail,
                      outcome.seconds, outcome.timed_out, timeout)
    steps.append(step)
    if outcome.timed_out:
        raise _Failed(*_diagnose(step, src, {main: text}))
    failed = [c for c in calls if not c.get("ok")]
    if failed:
        c = failed[0]
        where = ext_dir / str(c.get("name"))
        build = StepResult(f"{c.get('via')} {c.get('name')}", (), 1, str(c.get("error") or ""), step.seconds)
        kind, msg = _diagnose(build, where, {"cuda.cu": "", "main.cpp": ""})
        raise _Failed(kind, msg + f" (the extension {c.get('name')!r} that {main} builds at import)")
    if not res.get("finished"):
        raise _Failed("internal", f"the import of {main} did not finish: {outcome.describe_crash()}")
    err = res.get("import_error")
    if err and not (calls and not res.get("cuda_available") and any(w in err for w in _NO_GPU_AT_IMPORT)):
        raise _Failed("compile", f"{main} raised on import, so ModelNew cannot be loaded: {err}")


def _publish(result: BuildResult, work: Path, entry: Path, steps: list[StepResult], force: bool) -> None:
    """Write result.json + build.log into the temp dir, then rename it to the entry (atomic on one fs)."""
    result.entry_dir = entry
    for obj in [*work.glob("*.o"), *work.glob("*.d")]:
        obj.unlink()  # the .so is all we keep; objects (in the object cache, if cacheable) only cost disk
    (work / "result.json").write_text(json.dumps(result.to_json(), indent=1))
    (work / "build.log").write_text(_full_log(steps))
    old = None
    if entry.exists() and force:
        old = entry.parent / f".old-{entry.name}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(entry, old)
        except OSError:
            old = None
    try:
        os.rename(work, entry)
    except OSError:  # an entry appeared meanwhile (a concurrent builder of the same source): keep theirs
        shutil.rmtree(work, ignore_errors=True)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)  # a sandbox that mapped the old .so keeps its mapping


# ---------------------------------------------------------------------------- checks after linking
_UNDEF = re.compile(r"undefined reference to [`'](?P<sym>.+?)'\s*$")
_MORE_UNDEF = re.compile(r"more undefined references to [`'](?P<sym>.+?)' follow")
_IN_FUNCTION = re.compile(r"^(?:.*ld(?:\.\w+)?: )?(?P<obj>[\w.\-]+\.o): in function [`'](?P<fn>.+?)':\s*$")
_PY_SYMBOL = re.compile(r"^_?Py|^_Py")


def _unresolved(output: str) -> list[tuple[str, str, str]]:
    """(symbol, object, function) for each non-Python symbol the linker could not resolve."""
    found: dict[str, tuple[str, str, str]] = {}
    obj, fn = "", ""
    for line in output.splitlines():
        if m := _IN_FUNCTION.match(line):
            obj, fn = m.group("obj"), m.group("fn")
        elif m := _UNDEF.search(line):
            sym = m.group("sym")
            if not _PY_SYMBOL.match(sym) and sym not in found:
                found[sym] = (sym, obj, fn)
    return list(found.values())


def _defined_functions(obj: Path) -> list[str]:
    nm = shutil.which("nm")
    if nm is None or not obj.is_file():
        return []
    try:
        out = subprocess.run([nm, "-C", "--defined-only", str(obj)], capture_output=True, text=True,
                             timeout=30, env=compiler_env()).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    # A __global__ kernel shows up as a host function too (its launch stub); only launchers are of interest.
    kernels = {m.group(2)[: int(m.group(1))] for m in re.finditer(r"__device_stub__Z(\d+)(\w+)", out)}
    names = []
    for line in out.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[1] in ("T", "W") and not parts[2].startswith(("__", "_GLOBAL")):
            if parts[2].split("(")[0] not in kernels:
                names.append(parts[2])
    return names


def _check_link(link: StepResult, work: Path, files: dict[str, str], objects: dict[str, Path]) -> None:
    if link.timed_out or link.rc != 0:
        raise _Failed(*_diagnose(link, work, files))
    missing = _unresolved(link.output)
    if not missing:
        return
    sym, obj, fn = missing[0]
    where = obj.replace(".o", ".cpp") if obj == "binding.o" else (obj or "an object")
    msg = (f"link failed: {where}" + (f" (in {fn})" if fn else "") + f" uses `{sym}`, which nothing defines.")
    if "kernel.o" in objects:
        defined = [d for d in _defined_functions(objects["kernel.o"]) if "(" in d and "<" not in d.split("(")[0]]
        msg += (" kernel.cu must define it with exactly this name and these parameter types (C++ mangles "
                "both into the symbol; an `extern \"C\"` on only one side also breaks it).")
        if defined:
            msg += " kernel.cu defines: " + "; ".join(defined[:8]) + "."
    if len(missing) > 1:
        msg += " Also undefined: " + ", ".join(f"`{m[0]}`" for m in missing[1:6]) + "."
    raise _Failed("link", msg)


def _check_export(so: Path, module_name: str, steps: list[StepResult], timings: dict[str, float]) -> None:
    """The .so must export PyInit_<module_name>, or Python cannot import it."""
    nm = shutil.which("nm")
    if nm is None:
        return
    t0 = time.monotonic()
    try:
        out = subprocess.run([nm, "-D", "--defined-only", str(so)], capture_output=True, text=True, timeout=30,
                             env=compiler_env()).stdout
    except (OSError, subprocess.SubprocessError):
        return
    timings["check"] = round(time.monotonic() - t0, 3)
    exported = re.findall(r"\bPyInit_(\w+)", out)
    if module_name in exported:
        return
    if exported:
        raise _Failed("link", f"the module exports PyInit_{exported[0]} but is loaded as {module_name}: "
                              "write PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) so the build can name it.")
    raise _Failed("link", "the module defines no Python entry point: the binding needs "
                          "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"forward\", &forward); }.")


def _pch_used(output: str) -> bool:
    return any(line.startswith("! ") and line.rstrip().endswith(".gch") for line in output.splitlines())


# ---------------------------------------------------------------------------- diagnostics
_ERR_PATTERNS = (
    # nvcc front end: kernel.cu(12): error: identifier "foo" is undefined
    re.compile(r"^(?P<file>[^\s:][^:]*?)\((?P<line>\d+)\): (?:catastrophic error|error)(?: #\S+)?: ?(?P<msg>.*)$"),
    # gcc / g++ (also the host side of nvcc): binding.cpp:12:5: error: ...
    re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?:\d+:)? (?:fatal error|error): (?P<msg>.*)$"),
    re.compile(r"^(?P<file>ptxas|nvlink|nvcc) (?:fatal|error)\s*: (?P<msg>.*)$"),
    re.compile(r"^(?:\S*/)?ld(?:\.\w+)?: (?P<msg>(?:cannot find|.*error).*)$"),
    re.compile(r"^(?P<msg>.*(?:multiple definition of|undefined reference to) .*)$"),
)
_TRANSIENT = ("internal compiler error: Killed", "No space left on device", "Cannot allocate memory",
              "virtual memory exhausted", "out of memory", "Resource temporarily unavailable")


def _looks_transient(output: str) -> bool:
    return any(t in output for t in _TRANSIENT)


def _diagnose(step: StepResult, src: Path, files: dict[str, str]) -> tuple[FailureKind, str]:
    """One paragraph naming file:line and the cause, plus the failure kind."""
    what = step.name
    if step.timed_out:
        return "timeout", (f"{what} timed out after {step.timeout_s:.0f} s and its process group was killed. "
                           "Heavy templates or unrolling, or an overloaded machine; the failure was not cached, "
                           "so a retry compiles again.")
    if step.rc in (126, 127) and step.output.startswith("cannot run"):
        return "internal", f"{what}: {step.output.strip()}"
    if "Failed to preprocess host compiler properties" in step.output:  # nvcc could not run its host compiler
        return "internal", f"{what}: {_first_lines(step.output, 3)} (the host compiler is not usable here)"
    text = _clean(step.output, src)
    kind: FailureKind = "link" if what == "link" else "compile"
    if step.rc < 0 or _looks_transient(text):
        return "internal", (f"{what} was killed or ran out of resources (rc {step.rc}): "
                            f"{_first_lines(text, 3)}. Not cached; a retry may succeed.")
    lines = text.splitlines()
    n_errors, first = 0, None
    for i, line in enumerate(lines):
        for pat in _ERR_PATTERNS:
            if m := pat.match(line.strip()):
                n_errors += 1
                if first is None:
                    first = (i, m.groupdict())
                break
    if first is None:
        return kind, f"{what} failed (rc {step.rc}): {_first_lines(text, 4) or 'no output'}."
    i, g = first
    file, lineno, msg = g.get("file"), g.get("line"), (g.get("msg") or "").strip()
    where = f"{_short(file)}:{lineno}" if file and lineno else (file or what)
    out = f"{what} failed: {where}: {msg}"
    if file and lineno:
        src_line = _source_line(src, files, _short(file), int(lineno))
        if src_line is not None:
            out += f" — line {lineno} reads `{src_line.strip()}`"
        if _short(file) not in files:  # error inside a torch/CUDA header: name where the candidate reached it
            if reach := _candidate_location(lines, files):
                out += f" (reached from {reach})"
    out += "." if not out.endswith(".") else ""
    if n_errors > 1:
        out += f" {n_errors} errors in all; the log shows each."
    return kind, out


def _short(path: str | None) -> str:
    if not path:
        return ""
    p = path[2:] if path.startswith("./") else path
    return p


def _source_line(src: Path, files: dict[str, str], rel: str, lineno: int) -> str | None:
    if rel not in files:
        return None
    try:
        lines = (src / rel).read_text().splitlines()
    except OSError:
        return None
    return lines[lineno - 1][:200] if 0 < lineno <= len(lines) else None


def _candidate_location(lines: list[str], files: dict[str, str]) -> str | None:
    names = "|".join(re.escape(f) for f in files)
    if not names:
        return None
    pat = re.compile(rf"(?<![\w/.])({names})(?::(\d+)|\((\d+)\))")
    for line in lines:
        if m := pat.search(line):
            return f"{m.group(1)}:{m.group(2) or m.group(3)}"
    return None


def _first_lines(text: str, n: int) -> str:
    keep = [l.strip() for l in text.splitlines() if l.strip()][:n]
    return " / ".join(keep)[:600]


def _tail(text: str, n: int) -> str:
    return text[-n:].strip()


def _strip_comments(source: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", source, flags=re.DOTALL)


# ---------------------------------------------------------------------------- logs
_H_LINE = re.compile(r"^(\.+|!|x) \S")


def _clean(output: str, base: Path) -> str:
    """Drop g++ -H listings and the linker's Python-API warnings; show paths relative to the build dir."""
    out: list[str] = []
    in_guards = False
    for line in output.splitlines():
        if _H_LINE.match(line):
            continue
        if line.startswith("Multiple include guards may be useful for:"):
            in_guards = True
            continue
        if in_guards and ": " not in line:
            continue
        in_guards = False
        if (m := _UNDEF.search(line) or _MORE_UNDEF.search(line)) and _PY_SYMBOL.match(m.group("sym")):
            continue
        if _IN_FUNCTION.match(line):
            continue  # kept only when followed by a real undefined reference (re-added below)
        out.append(line)
    text = "\n".join(out)
    for prefix in (str(base / "src") + "/", str(base) + "/", str(base.parent) + "/"):
        text = text.replace(prefix, "")
    return text


def _render_log(steps: list[StepResult], work: Path) -> str:
    parts = []
    for s in steps:
        status = "timed out" if s.timed_out else f"rc {s.rc}"
        body = _clean(s.output, work).strip()
        if s.name == "link" and (missing := _unresolved(s.output)):
            body = "\n".join(f"{obj}: in {fn}: undefined reference to `{sym}'" for sym, obj, fn in missing)
        parts.append(f"== {s.name} ({s.seconds:.1f} s, {status})" + (f"\n{body}" if body else ""))
    text = "\n".join(parts)
    if len(text) > LOG_LIMIT:
        head, tail = text[: LOG_LIMIT * 3 // 4], text[-LOG_LIMIT // 5:]
        text = f"{head}\n... [{len(text) - len(head) - len(tail)} characters trimmed] ...\n{tail}"
    return text


def _full_log(steps: list[StepResult]) -> str:
    parts = []
    for s in steps:
        head = f"$ {' '.join(s.cmd)}\n" if s.cmd else ""  # a step that ran no command (a cached object, a note)
        parts.append(f"{head}# {s.name}: rc {s.rc}, {s.seconds:.2f} s{', timed out' if s.timed_out else ''}\n"
                     f"{s.output}")
    return "\n\n".join(parts)


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
    import importlib.machinery
    import importlib.util

    import torch  # noqa: F401

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
