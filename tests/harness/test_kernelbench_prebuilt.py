"""A KernelBench candidate's load_inline builds reach the runner's copy of its extensions folder without a rebuild,
and only while the sources torch writes there are the ones that were built (engine.harness.kernelbench_prebuilt).

These use torch's own ExtensionVersioner, called as torch's _jit_compile calls it; the real build and the
import of a copy without ninja running are in tests/harness/test_build.py (slow)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from torch.utils._cpp_extension_versioner import ExtensionVersioner

from engine.harness.kernelbench_prebuilt import MANIFEST, recording_versioner, seed_versions, write_manifest


def _torch_call(versioner: ExtensionVersioner, root: Path, name: str, flags: list[str] | None = None) -> int:
    """What load_inline does for `name` under TORCH_EXTENSIONS_DIR=root: the versioner call of _jit_compile."""
    folder = os.path.join(str(root), name)
    return versioner.bump_version_if_changed(
        name, [os.path.join(folder, "main.cpp"), os.path.join(folder, "cuda.cu")],
        build_arguments=[None, flags or ["-O3"], None, None], build_directory=folder,
        with_cuda=True, with_sycl=False, is_python_module=True, is_standalone=False)


def _build(root: Path, name: str, kernel: str = "__global__ void k() {}") -> None:
    """A build folder as torch leaves it: the sources it wrote and the library ninja linked."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "main.cpp").write_text("#include <torch/extension.h>\n")
    (folder / "cuda.cu").write_text(kernel)
    (folder / f"{name}.so").write_bytes(b"\x7fELF")


def _compile_stage(root: Path, *names: str) -> list[str]:
    """The compile child's recording and the compile stage's manifest, for builds of `names` under root."""
    log: list[dict] = []
    versioner = ExtensionVersioner()
    recording_versioner(versioner, log)
    for name in names:
        _build(root, name)
        assert _torch_call(versioner, root, name) == 0
    return write_manifest(root, log)


def test_a_copy_of_the_build_folder_is_up_to_date_for_torch_in_the_runner(tmp_path: Path) -> None:
    built, staged = tmp_path / "cache", tmp_path / "scratch" / "torch_ext"
    assert _compile_stage(built, "ext_a", "ext_b") == ["ext_a", "ext_b"]
    shutil.copytree(built, staged)
    runner = ExtensionVersioner()
    assert seed_versions(str(staged), runner) == ["ext_a", "ext_b"]
    # torch compares old and new version: equal (0 == 0) skips the build step and imports the staged .so
    assert runner.get_version("ext_a") == 0 and _torch_call(runner, staged, "ext_a") == 0
    # without the seed the same call is a first sight (None -> 0): torch would run ninja, which rebuilds a copy
    assert ExtensionVersioner().get_version("ext_a") is None


def test_sources_other_than_those_built_make_torch_build_again(tmp_path: Path) -> None:
    built, staged = tmp_path / "cache", tmp_path / "scratch" / "torch_ext"
    _compile_stage(built, "ext_a")
    shutil.copytree(built, staged)
    runner = ExtensionVersioner()
    seed_versions(str(staged), runner)
    (staged / "ext_a" / "cuda.cu").write_text("__global__ void k() { /* what the runner's import wrote */ }")
    assert _torch_call(runner, staged, "ext_a") == 1        # torch builds it as ext_a_v1
    other = ExtensionVersioner()
    seed_versions(str(staged), other)
    assert _torch_call(other, staged, "ext_a", flags=["-O0"]) == 1   # other flags: built again too


def test_only_builds_the_runner_can_reuse_enter_the_manifest(tmp_path: Path) -> None:
    root = tmp_path / "ext"
    log: list[dict] = []
    versioner = ExtensionVersioner()
    recording_versioner(versioner, log)
    _build(root, "twice")
    _torch_call(versioner, root, "twice")
    (root / "twice" / "cuda.cu").write_text("changed")
    assert _torch_call(versioner, root, "twice") == 1           # built a second time in the import: left out
    _build(root, "no_library")
    (root / "no_library" / "no_library.so").unlink()
    _torch_call(versioner, root, "no_library")                  # its build failed: left out
    outside = tmp_path / "elsewhere"
    _build(outside, "outside")
    _torch_call(versioner, outside, "outside")                  # a build_directory of the candidate's choosing
    _build(root, "good")
    _torch_call(versioner, root, "good")
    assert write_manifest(root, log) == ["good"]
    entry = json.loads((root / MANIFEST).read_text())["builds"][0]
    assert entry["folder"] == "good" and entry["sources"] == ["main.cpp", "cuda.cu"]
    assert entry["arguments"]["build_arguments"] == [None, ["-O3"], None, None]


def test_a_missing_or_broken_manifest_seeds_nothing(tmp_path: Path) -> None:
    assert seed_versions(str(tmp_path), ExtensionVersioner()) == []
    (tmp_path / MANIFEST).write_text("{not json")
    assert seed_versions(str(tmp_path), ExtensionVersioner()) == []
    (tmp_path / MANIFEST).write_text(json.dumps({"builds": [{"name": "x"}, {"folder": "y"}]}))
    assert seed_versions(str(tmp_path), ExtensionVersioner()) == []
