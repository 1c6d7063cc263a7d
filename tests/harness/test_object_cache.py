"""Object cache of the native split build (engine/harness/object_cache.py): kernel.o and binding.o kept by content
and flags, so a candidate that changes only kernel.cu costs an nvcc run and a link.

The key, dependency-list and store tests run no compiler. Tests marked `slow` run the real compilers (no GPU
needed) in the session's shared cache (conftest `native_cache_root`, so the precompiled header is built once);
their sources differ from tests/fixtures/native in launch.h, so tests/harness/test_build.py never finds their objects.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from engine.candidates import Candidate, load_candidate
from engine.harness import object_cache as oc
from engine.harness.build.native import BINDING_MODULE
from engine.harness.build.result import BuildResult
from engine.harness.build.stage import build_candidate
from engine.harness.build.steps import _declares_extension_name
from engine.harness.toolchain import Toolchain

from tests.paths import FIXTURES, REPO

FIXTURE = FIXTURES / "native"
FILES = {"kernel.cu": b"#include \"launch.h\"\n__global__ void k() {}\n",
         "binding.cpp": b"#include \"launch.h\"\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n",
         "launch.h": b"#pragma once\nvoid launch();\n"}
NVCC = ["nvcc", "-c", "kernel.cu", "-o", "/cache/builds/k/.tmp-1/kernel.o", "-O3", "-MMD", "-MF",
        "/cache/builds/k/.tmp-1/kernel.d"]


def _elf(payload: bytes = b"") -> bytes:
    """A minimal little-endian 64-bit relocatable ELF file: header, `payload`, one section header."""
    shoff = 64 + len(payload)
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<H", header, 16, 1)           # ET_REL
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HH", header, 0x3A, 64, 1)     # e_shentsize, e_shnum
    return bytes(header) + payload + bytes(64)


def _key(files: dict[str, bytes] = FILES, source: str = "kernel.cu", flags=NVCC, tc: str = "tc1", pch: str = "") -> str:
    return oc.object_key(source, oc.keyed_files(files, source), oc.key_flags(flags), tc, pch)


# ---------------------------------------------------------------------------- the key (no compiler runs)
def test_the_key_changes_with_every_input_that_shapes_the_object() -> None:
    base = _key()
    assert base == _key() and re.fullmatch(r"[0-9a-f]{64}", base)
    assert _key({**FILES, "kernel.cu": FILES["kernel.cu"] + b"// x\n"}) != base          # the source's bytes
    assert _key({**FILES, "launch.h": FILES["launch.h"] + b"\n"}) != base               # a header's bytes
    assert _key({**FILES, "tile.cuh": b"#pragma once\n"}) != base                       # a header more
    renamed = {k: v for k, v in FILES.items() if k != "launch.h"} | {"launch2.h": FILES["launch.h"]}
    assert _key(renamed) != base                                                        # a header's name
    assert _key(flags=[*NVCC, "-lineinfo"]) != base                                     # a flag
    assert _key(flags=[f if f != "-O3" else "-O2" for f in NVCC]) != base
    assert _key(tc="tc2") != base                                                       # the toolchain
    assert _key(source="binding.cpp", pch="a") != _key(source="binding.cpp", pch="b")   # the precompiled header


def test_the_key_leaves_out_output_paths_and_the_other_primary_source() -> None:
    elsewhere = [a.replace(".tmp-1", ".tmp-2") for a in NVCC]
    assert _key(flags=elsewhere) == _key()                      # -o / -MF name the build folder, not the object
    assert oc.key_flags(NVCC) == ["nvcc", "-c", "kernel.cu", "-O3", "-MMD"]
    assert _key({**FILES, "binding.cpp": b"// another binding\n"}) == _key()
    assert (_key({**FILES, "kernel.cu": b"// another kernel\n"}, source="binding.cpp")
            == _key(source="binding.cpp"))
    assert set(oc.keyed_files(FILES, "binding.cpp")) == {"binding.cpp", "launch.h"}
    with pytest.raises(ValueError):
        oc.object_key("kernel.cu", {"launch.h": b""}, [], "tc1")


def test_only_a_binding_that_uses_torch_extension_name_gets_the_alias() -> None:
    assert _declares_extension_name("PYBIND11_MODULE( TORCH_EXTENSION_NAME , m) {}")
    assert not _declares_extension_name("PYBIND11_MODULE(my_ext, m) {}")   # its own name: PyInit_my_ext
    assert not _declares_extension_name("// PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)\n")
    assert BINDING_MODULE.isidentifier()


# ---------------------------------------------------------------------------- dependency lists
def test_dep_paths_reads_make_rules_as_compilers_write_them() -> None:
    text = ("/w/.tmp-1/binding.o: binding.cpp /c/pch/kbench_torch.h \\\n  launch.h my\\ dir/x.h \\\n"
            "  /usr/local/cuda/include/cuda_runtime_api.h\n")
    assert oc.dep_paths(text) == ["binding.cpp", "/c/pch/kbench_torch.h", "launch.h", "my dir/x.h",
                                  "/usr/local/cuda/include/cuda_runtime_api.h"]
    assert oc.dep_paths("kernel.o : kernel.cu \\\n    launch.h\n") == ["kernel.cu", "launch.h"]
    assert oc.dep_paths("") == []


def test_unkeyed_inputs_names_what_the_compile_read_beyond_its_key(tmp_path: Path) -> None:
    work = tmp_path / ".tmp-1"
    src = work / "src"
    src.mkdir(parents=True)
    dep = work / "binding.d"
    keyed = oc.keyed_files(FILES, "binding.cpp")
    dep.write_text(f"{work}/binding.o: binding.cpp launch.h /usr/include/stdio.h {tmp_path}/pch/kbench_torch.h\n")
    assert oc.unkeyed_inputs(dep, src, work, keyed) == []
    dep.write_text(f"{work}/binding.o: binding.cpp launch.h ./kernel.cu\n")       # binding.cpp #includes kernel.cu
    assert oc.unkeyed_inputs(dep, src, work, keyed) == ["src/kernel.cu"]
    dep.write_text(f"{work}/binding.o: binding.cpp ../kernel.o\n")                 # anything else of the folder
    assert oc.unkeyed_inputs(dep, src, work, keyed) == ["kernel.o"]
    assert oc.unkeyed_inputs(work / "missing.d", src, work, keyed) is None           # nothing proved
    dep.write_text("")
    assert oc.unkeyed_inputs(dep, src, work, keyed) is None


# ---------------------------------------------------------------------------- the store
def test_publish_then_fetch_copies_the_object(tmp_path: Path) -> None:
    obj, dest = tmp_path / "binding.o", tmp_path / "work" / "binding.o"
    dest.parent.mkdir()
    obj.write_bytes(_elf(b"code"))
    assert oc.fetch(tmp_path / "c", "tc1", "k1", dest) is None
    stored = oc.publish(tmp_path / "c", "tc1", "k1", obj)
    assert stored == tmp_path / "c" / "objects" / "tc1" / "k1.o" and stored.read_bytes() == obj.read_bytes()
    assert oc.fetch(tmp_path / "c", "tc1", "k1", dest) == stored
    assert dest.read_bytes() == obj.read_bytes()
    assert os.stat(dest).st_ino != os.stat(stored).st_ino  # a copy: the jailed linker never holds the cache's file
    assert oc.fetch(tmp_path / "c", "tc2", "k1", tmp_path / "x.o") is None  # another toolchain's objects are apart


@pytest.mark.parametrize("damage", [lambda b: b[:40], lambda b: b[:-10], lambda b: bytes(len(b)),
                                    lambda b: b"not an object at all"])
def test_a_damaged_cached_object_is_a_miss_and_is_removed(tmp_path: Path, damage) -> None:
    obj = tmp_path / "kernel.o"
    obj.write_bytes(_elf(b"code"))
    stored = oc.publish(tmp_path, "tc1", "k1", obj)
    stored.write_bytes(damage(stored.read_bytes()))  # a crash after the rename, a truncated copy, a bad disk
    assert oc.fetch(tmp_path, "tc1", "k1", tmp_path / "out.o") is None
    assert not stored.exists() and not (tmp_path / "out.o").exists()


def test_only_whole_objects_are_published_and_publishers_leave_no_temp_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.o"
    bad.write_bytes(b"half an object")
    assert oc.publish(tmp_path, "tc1", "k1", bad) is None
    assert oc.publish(tmp_path, "tc1", "k1", tmp_path / "missing.o") is None
    # two builders of one key: both objects are valid, the last rename wins, no temp file stays behind
    a, b = tmp_path / "a.o", tmp_path / "b.o"
    a.write_bytes(_elf(b"first"))
    b.write_bytes(_elf(b"second"))
    oc.publish(tmp_path, "tc1", "k1", a)
    stored = oc.publish(tmp_path, "tc1", "k1", b)
    assert stored.read_bytes() == b.read_bytes()
    assert sorted(p.name for p in stored.parent.iterdir()) == ["k1.o"]
    oc.discard(tmp_path, "tc1", "k1")
    oc.discard(tmp_path, "tc1", "k1")  # twice: no error
    assert not stored.exists()


def test_pch_identity_is_kept_beside_the_gch_and_follows_a_new_one(tmp_path: Path) -> None:
    header = tmp_path / "kbench_torch.h"
    header.write_text("#include <torch/extension.h>\n")
    gch = tmp_path / "kbench_torch.h.gch"
    gch.write_bytes(b"gch one")
    assert oc.pch_identity(None) == ""
    first = oc.pch_identity(header)
    side = tmp_path / "kbench_torch.h.gch.sha256"
    assert side.read_text().split()[0] == hashlib.sha256(b"gch one").hexdigest()
    oc._PCH_IDS.clear()
    assert oc.pch_identity(header) == first                          # from the side file, without hashing
    new = tmp_path / "new.gch"
    new.write_bytes(b"gch two")                                      # same size: only the stamp tells them apart
    os.replace(new, gch)                                             # how ensure_pch puts a rebuilt one in place
    second = oc.pch_identity(header)
    assert second != first and side.read_text().split()[0] == hashlib.sha256(b"gch two").hexdigest()
    header.write_text("#include <torch/all.h>\n")
    assert oc.pch_identity(header) not in (first, second)


# ---------------------------------------------------------------------------- real compiles (slow)
# conftest's `toolchain` (session): the same key as tests/harness/test_build.py, one precompiled header per session
def _cand(**changes: str) -> Candidate:
    """The native fixture with launch.h of this module's own, plus `changes`."""
    files = dict(load_candidate(FIXTURE).files)
    files["launch.h"] += "// tests/harness/test_object_cache.py\n"
    return Candidate("native", {**files, **changes}, "object-cache-test")


def _kernel(block: int) -> str:
    return load_candidate(FIXTURE).files["kernel.cu"].replace("BLOCK_SIZE 256", f"BLOCK_SIZE {block}")


def _reused(res: BuildResult) -> dict[str, Path]:
    """object name -> the cache file this build copied it from (its log names each one)."""
    found = re.findall(r"reused (objects/\S+\.o): (\w+\.o) compiled earlier", res.log)
    return {name: res.entry_dir.parents[2] / rel for rel, name in found}


def _import(*results: BuildResult) -> None:
    """Import the builds in one fresh process: each is its own module under its own name, forward and all."""
    code = ("import json, sys\nfrom engine.harness.build.stage import BuildResult, load_module\n"
            "ms = [load_module(BuildResult.from_json(r)) for r in json.loads(sys.argv[1])]\n"
            "assert len({id(m) for m in ms}) == len(ms) and len({id(m.forward) for m in ms}) == len(ms)\n"
            "print(*(f'{m.__name__}:{callable(m.forward)}' for m in ms))\n")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps([r.to_json() for r in results])],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [f"{r.module_name}:True" for r in results]


@pytest.fixture(scope="module")
def first(toolchain: Toolchain, native_cache_root: Path) -> BuildResult:
    res = build_candidate(_cand(), native_cache_root, toolchain)
    assert res.ok, f"{res.error}\n{res.log}"
    return res


@pytest.mark.slow
def test_a_new_kernel_with_the_same_binding_reuses_binding_o(first: BuildResult, toolchain: Toolchain,
                                                            native_cache_root: Path) -> None:
    assert "cached object" not in first.log and {"nvcc", "cxx", "link"} <= set(first.steps)
    res = build_candidate(_cand(**{"kernel.cu": _kernel(128)}), native_cache_root, toolchain)
    assert res.ok, f"{res.error}\n{res.log}"
    assert res.steps["cxx (cached object)"] == 0.0 and "cxx" not in res.steps and res.steps["nvcc"] > 0
    assert "== g++ binding.cpp (cached object) (0.0 s, rc 0)" in res.log
    assert "# g++ binding.cpp (cached object): rc 0" in (res.entry_dir / "build.log").read_text()
    assert set(_reused(res)) == {"binding.o"} and res.pch_used is None  # g++ did not run
    # one binding.o in both, yet two modules, each named after its own candidate, importable side by side
    assert res.module_name == f"kb_{res.source_hash}" != first.module_name
    _import(first, res)


@pytest.mark.slow
def test_a_changed_header_compiles_both_objects_again(first: BuildResult, toolchain: Toolchain,
                                                      native_cache_root: Path) -> None:
    launch = _cand().files["launch.h"] + "#define SCALE_ADD_VERSION 2\n"
    res = build_candidate(_cand(**{"launch.h": launch}), native_cache_root, toolchain)
    assert res.ok, f"{res.error}\n{res.log}"
    assert "cached object" not in res.log and {"nvcc", "cxx"} <= set(res.steps) and res.pch_used is True


@pytest.mark.slow
def test_a_module_that_takes_another_builds_name_still_gets_a_file_of_its_own(
        first: BuildResult, toolchain: Toolchain, native_cache_root: Path) -> None:
    """The runner stages the timing helper's .so and the candidate's side by side by file name: a binding that
    hard-codes another build's module name (the helper's is public) must not get that build's file name."""
    binding = _cand().files["binding.cpp"].replace("PYBIND11_MODULE(TORCH_EXTENSION_NAME,",
                                                   f"PYBIND11_MODULE({first.module_name},")
    res = build_candidate(_cand(**{"binding.cpp": binding}), native_cache_root, toolchain)
    assert res.ok, f"{res.error}\n{res.log}"
    assert res.module_name == first.module_name and res.so_path.name == f"kb_{res.source_hash}.so"
    assert res.so_path.name != first.so_path.name and "--defsym" not in (res.entry_dir / "build.log").read_text()
    _import(res)


@pytest.mark.slow
def test_a_cached_object_that_breaks_the_link_is_compiled_again(first: BuildResult, toolchain: Toolchain,
                                                                native_cache_root: Path) -> None:
    # the same candidate again after its build entry went away: both objects come from the cache, a link only
    shutil.rmtree(first.entry_dir)
    again = build_candidate(_cand(), native_cache_root, toolchain)
    assert again.ok and not again.cache_hit
    assert {"nvcc (cached object)", "cxx (cached object)", "link"} <= set(again.steps)
    assert "nvcc" not in again.steps and "cxx" not in again.steps
    cached = _reused(again)
    assert set(cached) == {"kernel.o", "binding.o"}
    # damage the cached kernel.o in a way only the link can see: a whole object, but the wrong one
    bogus = cached["binding.o"].read_bytes()
    cached["kernel.o"].write_bytes(bogus)
    shutil.rmtree(again.entry_dir)
    res = build_candidate(_cand(), native_cache_root, toolchain)
    assert res.ok, f"{res.error}\n{res.log}"
    # which of the two broke the link is anyone's guess: both are dropped, compiled fresh, and linked once more
    assert "the link failed with cached kernel.o and binding.o: removed from the object cache" in res.log
    assert res.log.count("== link (") == 2 and res.steps["nvcc"] > 0 and res.steps["cxx"] > 0
    assert {"nvcc (cached object)", "cxx (cached object)"} <= set(res.steps)
    fresh = cached["kernel.o"].read_bytes()                      # the fresh object took the bad one's place
    assert fresh != bogus and oc.looks_like_object(fresh) and cached["binding.o"].is_file()
    _import(res)


@pytest.mark.slow
def test_a_failed_compile_leaves_no_object(first: BuildResult, toolchain: Toolchain, native_cache_root: Path) -> None:
    objects = oc.objects_dir(native_cache_root, toolchain.key())
    before = sorted(p.name for p in objects.iterdir())
    bad_kernel = _kernel(256).replace("out[i] =", "undeclared_thing_xyz += 1;\n        out[i] =")
    res = build_candidate(_cand(**{"kernel.cu": bad_kernel}), native_cache_root, toolchain)
    assert not res.ok and res.failure == "compile" and "undeclared_thing_xyz" in res.error
    assert set(_reused(res)) == {"binding.o"}                    # the good half came from the cache
    binding = load_candidate(FIXTURE).files["binding.cpp"].replace("return out;", "return out_xyz;")
    res = build_candidate(_cand(**{"binding.cpp": binding}), native_cache_root, toolchain)
    assert not res.ok and res.failure == "compile" and "out_xyz" in res.error
    assert sorted(p.name for p in objects.iterdir()) == before
