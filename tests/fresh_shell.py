"""A user's fresh shell for an exported package: its README's install-and-test block, and a venv of its own that
sees the torch (and Triton, setuptools, ninja, pytest) installed beside kbench, as a user's venv with torch in it
does, so the README's `pip install` of them is satisfied without a download."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path


def readme_block(readme: str) -> str:
    """The shell block after `<!-- install-and-test -->`: what the README tells a user to run."""
    after = readme.split("<!-- install-and-test -->", 1)[1]
    return after.split("```bash\n", 1)[1].split("```", 1)[0]


def fresh_venv(where: Path) -> Path:
    """A venv whose site-packages also sees this interpreter's, without its `bin` on PATH; its own
    site-packages (returned), first on sys.path, is where the package installs."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, capture_output=True)
    site = Path(subprocess.run([str(where / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "with-torch.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return site


def run_readme(pkg: Path, venv: Path, home: Path, timeout: float, **extra_env: str) -> subprocess.CompletedProcess:
    """`pkg`'s README install-and-test block, verbatim, in `pkg`: a shell with `venv`'s bin first on PATH, a HOME of
    its own (`home`, created), no CUDA_HOME or other variable of the test runner's beyond `extra_env`."""
    home.mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(home), "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
           "TMPDIR": os.environ.get("TMPDIR", "/tmp"), **extra_env}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", readme_block((pkg / "README.md").read_text())], cwd=pkg,
                          env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
