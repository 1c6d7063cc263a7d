"""ncu preloads its injection library into the process it profiles, after that process's jail is applied: the
jail must let it read ncu's install folder, wherever ncu was installed (seen on the H100 host: ld.so could not
preload /opt/nvidia/nsight-compute/2025.3.1/target/.../libInterceptorInjectionTarget.so)."""

from __future__ import annotations

import os
from pathlib import Path

from engine.profile.ncu import ncu_install_dirs


def _exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_a_symlinked_ncu_names_the_folder_of_the_real_binary(tmp_path, monkeypatch):
    real = _exe(tmp_path / "nsight" / "2025.3.1" / "ncu", "\x7fELF not really")
    (tmp_path / "nsight" / "2025.3.1" / "target").mkdir()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ncu").symlink_to(real)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert ncu_install_dirs("ncu", standalone_root=str(tmp_path / "none")) == [str(real.parent.resolve())]


def test_a_launcher_script_names_the_install_it_runs_and_standalone_installs_are_added(tmp_path, monkeypatch):
    install = tmp_path / "opt" / "nvidia" / "nsight-compute" / "2025.3.1"
    _exe(install / "ncu", "\x7fELF")
    other = tmp_path / "opt" / "nvidia" / "nsight-compute" / "2024.1.0"
    other.mkdir(parents=True)
    script = _exe(tmp_path / "cuda" / "bin" / "ncu", f'#!/bin/sh\nexec "{install}/ncu" "$@"\n')
    monkeypatch.setenv("PATH", str(script.parent))
    dirs = ncu_install_dirs("ncu", standalone_root=str(tmp_path / "opt" / "nvidia" / "nsight-compute"))
    assert dirs[0] == str(script.parent.resolve())
    assert str(install.resolve()) in dirs and str(other.resolve()) in dirs
    assert len(dirs) == len(set(dirs)) == 3


def test_no_ncu_on_path_adds_nothing_but_the_standalone_installs(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert ncu_install_dirs("ncu", standalone_root=str(tmp_path / "absent")) == []
    (tmp_path / "root" / "2025.1").mkdir(parents=True)
    assert ncu_install_dirs("ncu", standalone_root=str(tmp_path / "root")) == [
        os.path.realpath(tmp_path / "root" / "2025.1")]
