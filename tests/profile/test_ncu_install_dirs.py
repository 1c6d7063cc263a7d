"""ncu preloads its injection library into the process it profiles, after that process's jail is applied: the
jail must let it read ncu's `target` folder, wherever ncu was installed (seen on the H100 host: ld.so could not
preload /opt/nvidia/nsight-compute/2025.3.1/target/.../libInterceptorInjectionTarget.so), and nothing else
of the folder ncu sits in."""

from __future__ import annotations

from pathlib import Path

from engine.profile.ncu import ncu_install_dirs


def _install(root: Path, script: str | None = None) -> Path:
    """A fake Nsight Compute install: its ncu (a binary, or a launcher script) and its target folder."""
    (root / "target" / "linux-desktop-glibc_2_11_3-x64").mkdir(parents=True)
    ncu = root / "ncu"
    ncu.write_text(script or "\x7fELF not really")
    ncu.chmod(0o755)
    return ncu


def test_a_symlinked_ncu_names_the_target_folder_of_the_real_install(tmp_path, monkeypatch):
    real = _install(tmp_path / "nsight" / "2025.3.1")
    (tmp_path / "home" / "bin").mkdir(parents=True)
    (tmp_path / "home" / "bin" / "ncu").symlink_to(real)
    (tmp_path / "home" / "bin" / "notes.txt").write_text("a user's file beside the link")
    monkeypatch.setenv("PATH", str(tmp_path / "home" / "bin"))
    assert ncu_install_dirs("ncu", standalone_root=str(tmp_path / "none")) == [
        str((tmp_path / "nsight" / "2025.3.1" / "target").resolve())]


def test_a_launcher_script_names_the_install_it_runs_and_standalone_installs_are_added(tmp_path, monkeypatch):
    root = tmp_path / "opt" / "nvidia" / "nsight-compute"
    install = _install(root / "2025.3.1").parent
    other = _install(root / "2024.1.0").parent
    (root / "2023.1.0").mkdir()   # a leftover without a target folder: nothing to read there
    bindir = tmp_path / "home" / "bin"
    bindir.mkdir(parents=True)
    script = bindir / "ncu"
    script.write_text(f'#!/bin/sh\nexec "{install}/ncu" "$@"\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    dirs = ncu_install_dirs("ncu", standalone_root=str(root))
    assert dirs == [str((install / "target").resolve()), str((other / "target").resolve())]
    assert not any(d.startswith(str(bindir.resolve())) for d in dirs)   # the user's bin stays closed


def test_no_ncu_on_path_adds_only_standalone_installs(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert ncu_install_dirs("ncu", standalone_root=str(tmp_path / "absent")) == []
    _install(tmp_path / "root" / "2025.1")
    assert ncu_install_dirs("ncu", standalone_root=str(tmp_path / "root")) == [
        str((tmp_path / "root" / "2025.1" / "target").resolve())]
