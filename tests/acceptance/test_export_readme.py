"""An exported package, built and tested by following only its own README, in a fresh shell.

The user exports a built-in task's shipped kernel, a KernelBench ModelNew and a Triton kernel.py with the installed
`kbench`. Then, in another shell with a home of its own, no CUDA_HOME, CUDA_PATH or TORCH_CUDA_ARCH_LIST, and a Python environment of its own (a venv that sees
the torch, setuptools, ninja and pytest already installed beside kbench, as a user's venv with torch in it does:
the README's `pip install` of them is then satisfied without a download), the README's install-and-test block
runs verbatim in the package folder. It builds on this GPU-less machine (the package finds the CUDA toolkit
itself: here through the `nvcc` wrapper script on PATH, where torch's own guess fails) and its CPU tests pass.
The library it installs is a stripped release build, for the GPUs chosen at export with PTX, and the package
requires the torch it was built against (the Triton package: no library, the torch and Triton it was verified with).
"""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fresh_shell import fresh_venv, readme_block, run_readme
from tests.paths import REPO

pytestmark = pytest.mark.slow


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
    # a Triton kernel.py (pure Python: nothing to compile; never measured on a GPU here, hence --force)
    "triton": ("kbench_llama_rmsnorm", ["--from-dir", str(REPO / "tests" / "fixtures" / "triton" /
                                                          "llama_rmsnorm_forward"), "--task", "llama_rmsnorm",
                                        "--force"], 9),
}


@pytest.mark.parametrize("kind", list(EXPORTS))
def test_an_export_builds_and_passes_its_tests_by_its_readme_alone(user, tmp_path, kind):
    name, args, least_passed = EXPORTS[kind]
    pkg = tmp_path / name
    done = user.run("export", *args, "--out", str(pkg))
    assert done.returncode == 0, done.stderr
    assert "README.md" in done.stdout
    assert ("builds for 9.0+PTX" in done.stdout) == (kind != "triton"), done.stdout

    site = fresh_venv(tmp_path / "venv")
    assert "python -m pip install --no-build-isolation ." in readme_block((pkg / "README.md").read_text())
    run = run_readme(pkg, tmp_path / "venv", tmp_path / "shell-home", timeout=1500, MAX_JOBS="2")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-8000:]
    summary = re.search(r"(\d+) passed(?:, (\d+) skipped)?", out)
    assert summary and "failed" not in summary.group(0), out[-4000:]
    assert int(summary.group(1)) >= least_passed    # (native: every config's fake check, and the rest)
    assert "needs a CUDA GPU" in out or summary.group(2)
    meta = next(site.glob(f"{name}-*.dist-info")) / "METADATA"
    torch_version = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__.split('+')[0])"],
                                   capture_output=True, text=True).stdout.strip()
    assert f"Requires-Dist: torch=={torch_version}" in meta.read_text()
    if kind == "triton":   # the kernel as it was judged, installed in the fresh venv; no library to inspect
        assert (site / name / "kernel.py").read_bytes() == (Path(args[1]) / "kernel.py").read_bytes()
        assert "Requires-Dist: triton==" in meta.read_text()
        return

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
