"""An exported package, built and tested by following only its own README, in a fresh shell.

The user exports a built-in task's shipped kernel, and a KernelBench ModelNew, with the installed `kbench`. Then, in another shell with a home
of its own, no CUDA_HOME, CUDA_PATH or TORCH_CUDA_ARCH_LIST, and a Python environment of its own (a venv that sees
the torch, setuptools, ninja and pytest already installed beside kbench, as a user's venv with torch in it does:
the README's `pip install` of them is then satisfied without a download), the README's install-and-test block
runs verbatim in the package folder. It builds on this GPU-less machine (the package finds the CUDA toolkit
itself: here through the `nvcc` wrapper script on PATH, where torch's own guess fails) and its CPU tests pass.
The library it installs is a stripped release build, for the GPUs chosen at export with PTX, and the package
requires the torch it was built against.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.slow


def readme_block(readme: str) -> str:
    """The shell block after `<!-- install-and-test -->`: what the README tells a user to run."""
    after = readme.split("<!-- install-and-test -->", 1)[1]
    return after.split("```bash\n", 1)[1].split("```", 1)[0]


def fresh_venv(where: Path) -> Path:
    """A venv whose site-packages also sees this interpreter's (torch, setuptools, ninja, pytest), without its
    `bin` on PATH; its own site-packages, first on sys.path, is where the package installs."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, capture_output=True)
    site = Path(subprocess.run([str(where / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "with-torch.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return site


def elf_sections(path: Path) -> set[str]:
    """Section names of a 64-bit little-endian ELF file."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2, path
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx][4]
    return {data[strtab + h[0]:data.index(b"\0", strtab + h[0])].decode() for h in headers}


KB = REPO / "tests" / "fixtures" / "kernelbench"
EXPORTS = {
    # a built-in task's shipped kernel: a TORCH_LIBRARY op package (softmax has 7 configs)
    "native": ("kbench_softmax", ["--from-dir", str(REPO / "tasks" / "softmax" / "baselines" / "forward"),
                                  "--task", "softmax"], 7 + 6),
    # a KernelBench ModelNew built with load_inline (never measured on a GPU here, hence --force)
    "kernelbench": ("kbench_scaled_swish", ["--from-dir", str(KB / "candidates" / "scaled_swish_correct.py"),
                                            "--task", str(KB / "scaled_swish.py"), "--force"], 4),
}


@pytest.mark.parametrize("kind", list(EXPORTS))
def test_an_export_builds_and_passes_its_tests_by_its_readme_alone(user, tmp_path, kind):
    name, args, least_passed = EXPORTS[kind]
    pkg = tmp_path / name
    done = user.run("export", *args, "--out", str(pkg))
    assert done.returncode == 0, done.stderr
    assert "builds for 9.0+PTX" in done.stdout and "README.md" in done.stdout

    site = fresh_venv(tmp_path / "venv")
    home = tmp_path / "shell-home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": f"{tmp_path / 'venv' / 'bin'}:/usr/local/bin:/usr/bin:/bin",
           "LANG": "C.UTF-8", "TMPDIR": os.environ.get("TMPDIR", "/tmp"), "MAX_JOBS": "2"}
    script = readme_block((pkg / "README.md").read_text())
    assert "python -m pip install --no-build-isolation ." in script
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=pkg, env=env, capture_output=True,
                         text=True, timeout=1500, stdin=subprocess.DEVNULL)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-8000:]
    summary = re.search(r"(\d+) passed(?:, (\d+) skipped)?", out)
    assert summary and "failed" not in summary.group(0), out[-4000:]
    assert int(summary.group(1)) >= least_passed    # (native: every config's fake check, and the rest)
    assert "needs a CUDA GPU" in out or summary.group(2)

    # What was installed: the package in the fresh venv, its library stripped and built for sm_90 with PTX.
    libs = list((site / name).glob("_C.*.so" if kind == "native" else "ext0.*.so"))
    assert len(libs) == 1, list(site.iterdir())
    size = libs[0].stat().st_size
    sections = elf_sections(libs[0])
    print(f"{libs[0].name}: {size} bytes, sections {sorted(sections)}")
    assert not {".symtab", ".debug_info", ".debug_line"} & sections and size < 2_000_000, (size, sections)
    cuobjdump = Path("/usr/local/cuda/bin/cuobjdump")
    if cuobjdump.is_file():
        listing = subprocess.run([str(cuobjdump), "--list-elf", "--list-ptx", str(libs[0])], capture_output=True,
                                 text=True).stdout
        assert "sm_90" in listing and ".ptx" in listing, listing
    meta = next(site.glob(f"{name}-*.dist-info")) / "METADATA"
    torch_version = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__.split('+')[0])"],
                                   capture_output=True, text=True).stdout.strip()
    assert f"Requires-Dist: torch=={torch_version}" in meta.read_text()
