"""A KernelBench candidate's load_inline builds reach the runner's copy of its extensions folder without a rebuild,
and only while the sources torch writes there are the ones that were built (engine.harness.kernelbench.prebuilt).

These use torch's own ExtensionVersioner, called as torch's _jit_compile calls it; the real build and the
import of a copy without ninja running are in tests/harness/test_build.py (slow)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from torch.utils._cpp_extension_versioner import ExtensionVersioner

from engine.harness.kernelbench.prebuilt import (MANIFEST, manifest_path, recording_versioner, seed_versions,
                                                 write_manifest)


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


def _stage(built: Path, staged: Path) -> None:
    """What the judge stages for the runner (engine.pipeline.judge.runner_process.stage_candidate): the folder, and
    the manifest kept beside it, put inside the copy."""
    shutil.copytree(built, staged)
    shutil.copyfile(manifest_path(built), staged / MANIFEST)


def test_a_copy_of_the_build_folder_is_up_to_date_for_torch_in_the_runner(tmp_path: Path) -> None:
    built, staged = tmp_path / "cache", tmp_path / "scratch" / "torch_ext"
    assert _compile_stage(built, "ext_a", "ext_b") == ["ext_a", "ext_b"]
    _stage(built, staged)
    runner = ExtensionVersioner()
    assert seed_versions(str(staged), runner) == ["ext_a", "ext_b"]
    # torch compares old and new version: equal (0 == 0) skips the build step and imports the staged .so
    assert runner.get_version("ext_a") == 0 and _torch_call(runner, staged, "ext_a") == 0
    # without the seed the same call is a first sight (None -> 0): torch would run ninja, which rebuilds a copy
    assert ExtensionVersioner().get_version("ext_a") is None


def test_sources_other_than_those_built_make_torch_build_again(tmp_path: Path) -> None:
    built, staged = tmp_path / "cache", tmp_path / "scratch" / "torch_ext"
    _compile_stage(built, "ext_a")
    _stage(built, staged)
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
    assert not (root / MANIFEST).exists()     # beside the folder the candidate's import wrote, never in it
    entry = json.loads(manifest_path(root).read_text())["builds"][0]
    assert entry["folder"] == "good" and entry["sources"] == ["main.cpp", "cuda.cu"]
    assert entry["arguments"]["build_arguments"] == [None, ["-O3"], None, None]


def test_a_missing_or_broken_manifest_seeds_nothing(tmp_path: Path) -> None:
    assert seed_versions(str(tmp_path), ExtensionVersioner()) == []
    (tmp_path / MANIFEST).write_text("{not json")
    assert seed_versions(str(tmp_path), ExtensionVersioner()) == []
    (tmp_path / MANIFEST).write_text(json.dumps({"builds": [{"name": "x"}, {"folder": "y"}]}))
    assert seed_versions(str(tmp_path), ExtensionVersioner()) == []


def test_links_planted_in_the_build_folder_reach_none_of_the_users_files(tmp_path: Path) -> None:
    """The compile child runs the candidate's import with write access to its extensions folder. Links it leaves
    there are not followed: not by the manifest's write, not by the staging copy (which would hand the runner
    the user's file and change its mode), not by the compile verdict's quoted source line."""
    import os

    from engine.harness.build.diagnose import _source_line
    from engine.pipeline.judge.runner_process import make_run_dir, stage_candidate
    from engine.pipeline.protocol.types import CandidateSpec
    secret = tmp_path / "home" / ".netrc"
    secret.parent.mkdir()
    secret.write_text("machine api.example password hunter2\n")
    secret.chmod(0o600)
    root = tmp_path / "torch_extensions" / "abc123"
    log: list[dict] = []
    versioner = ExtensionVersioner()
    recording_versioner(versioner, log)
    _build(root, "ext_a")
    _torch_call(versioner, root, "ext_a")
    (root / MANIFEST).symlink_to(secret)                     # planted by the candidate's import
    (root / "ext_a" / "leak.txt").symlink_to(secret)
    (root / "linked_dir").symlink_to(secret.parent, target_is_directory=True)
    write_manifest(root, log)
    assert secret.read_text().startswith("machine") and (secret.stat().st_mode & 0o777) == 0o600
    run = make_run_dir()
    try:
        py = tmp_path / "model_new.py"
        py.write_text("class ModelNew: pass\n")
        stage_candidate(run, CandidateSpec(format="kernelbench", module_name="kb_x", py_path=str(py),
                                           torch_extensions=str(root)))
        staged = run.scratch / "torch_ext"
        links = [p for p in staged.rglob("*") if p.is_symlink()]
        assert not links and not (staged / "ext_a" / "leak.txt").exists() and not (staged / "linked_dir").exists()
        assert json.loads((staged / MANIFEST).read_text())["builds"][0]["name"] == "ext_a"   # kbench's, not the link
        assert not any("hunter2" in p.read_text(errors="replace") for p in staged.rglob("*") if p.is_file())
        assert (secret.stat().st_mode & 0o777) == 0o600 and secret.stat().st_uid == os.getuid()
    finally:
        shutil.rmtree(run.root, ignore_errors=True)
    (root / "ext_a" / "cuda.cu").unlink()
    (root / "ext_a" / "cuda.cu").symlink_to(secret)
    assert _source_line(root / "ext_a", {"cuda.cu": ""}, "cuda.cu", 1) is None
    assert _source_line(root / "linked_dir", {".netrc": ""}, ".netrc", 1) is None
