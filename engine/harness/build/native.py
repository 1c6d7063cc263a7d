"""The native split build (kernel.cu + binding.cpp): nvcc kernel.cu in parallel with g++ binding.cpp against
the precompiled header, either object possibly from the object cache (engine/harness/object_cache.py), then one
link. Split from engine/harness/build/stage.py; build_candidate calls it.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from engine.candidates import Candidate
from engine.harness import object_cache
from engine.harness.build.diagnose import _check_export, _check_link, _diagnose
from engine.harness.build.steps import (StepResult, _declares_extension_name, _Failed, _vendor_link, compile_jail,
                                        run_tool)
from engine.harness.pch import PCH_BASENAME, PchInfo, _pch_used, ensure_pch, pch_dir
from engine.harness.toolchain import Toolchain

# TORCH_EXTENSION_NAME for every binding.cpp, so that binding.o is the same whatever candidate it is linked into
# (and can come from the object cache); the link aliases PyInit_<module name> to PyInit_<this>.
BINDING_MODULE = "kbench_binding"


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
        binding.cmd = _binding_cmd(tc, pch.header, binding)
        binding.key = _binding_key(binding, pch.header, tc_key)
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


def _binding_cmd(tc: Toolchain, pch_header: Path | None, binding: _Object) -> list[str]:
    cmd = [tc.cxx, "-c", "binding.cpp", "-o", str(binding.path), *tc.host_flags(BINDING_MODULE)]
    if pch_header is not None:
        # -H lists the headers g++ opens: "! x.gch" = PCH used, "x x.gch" = found but rejected.
        cmd += ["-include", str(pch_header), "-Winvalid-pch", "-H"]
    return cmd + ["-MD", "-MF", str(binding.depfile)]


def _binding_key(binding: _Object, pch_header: Path | None, tc_key: str) -> str | None:
    try:
        return object_cache.object_key("binding.cpp", binding.keyed, object_cache.key_flags(binding.cmd), tc_key,
                                       object_cache.pch_identity(pch_header))
    except OSError:  # the .gch vanished under us: compile, cache nothing
        return None


def prebuild_binding(binding_cpp: str, cache_root: Path, tc: Toolchain, timeout_s: float = 300.0,
                     build_pch: bool = True) -> tuple[str, str]:
    """Compile `binding_cpp` into the object cache as the binding.o of a candidate whose only other file is
    kernel.cu (a kernel-only candidate's generated glue, engine/tasks/glue/generated.py), so that candidate's build
    finds it there and costs an nvcc run and a link. Returns (status, detail): "cached" (already there), "compiled",
    "no-pch" (`build_pch` False and no precompiled header yet: nothing done), or "failed" with the reason."""
    cache_root = Path(cache_root)
    tc_key = tc.key()
    if build_pch:
        pch = ensure_pch(cache_root, tc)
    else:
        header = pch_dir(cache_root, tc) / PCH_BASENAME
        if not Path(f"{header}.gch").is_file():
            return "no-pch", "no precompiled header yet for this toolchain"
        pch = PchInfo(header, False, 0.0)
    parent = cache_root / "builds" / tc_key
    work = parent / f".tmp-glue-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    src = work / "src"
    try:
        src.mkdir(parents=True)
        (src / "binding.cpp").write_text(binding_cpp)
        binding = _Object("binding.o", work / "binding.o", "g++ binding.cpp", "cxx",
                          object_cache.keyed_files({"binding.cpp": binding_cpp.encode()}, "binding.cpp"))
        binding.cmd = _binding_cmd(tc, pch.header, binding)
        binding.key = _binding_key(binding, pch.header, tc_key)
        if binding.key is not None and object_cache.object_path(cache_root, tc_key, binding.key).is_file():
            return "cached", f"objects/{tc_key}/{binding.key}.o"
        jail = compile_jail(work, [pch_dir(cache_root, tc)], tc)
        binding.step = run_tool(binding.cmd, src, timeout_s, binding.step_name, jail)
        if not binding.step.ok:
            return "failed", _diagnose(binding.step, src, {"binding.cpp": binding_cpp})[1]
        notes: list[StepResult] = []
        _store_objects((binding,), cache_root, tc_key, src, work, notes)
        if binding.key is None or not object_cache.object_path(cache_root, tc_key, binding.key).is_file():
            return "failed", "compiled, but not stored in the object cache" + (f": {notes[0].output}" if notes else "")
        return "compiled", f"objects/{tc_key}/{binding.key}.o in {binding.step.seconds:.1f} s"
    except OSError as exc:
        return "failed", f"{work}: {exc}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


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
