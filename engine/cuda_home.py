"""Where the CUDA toolkit is: one rule for kbench's builds and for the packages `kbench export` writes.

torch guesses its own CUDA_HOME once, when torch.utils.cpp_extension is imported: CUDA_HOME or CUDA_PATH, else
two folders above the first `nvcc` on PATH, else /usr/local/cuda. The second guess is wrong wherever that nvcc
is a wrapper script or a link (a /usr/local/bin/nvcc that execs /usr/local/cuda-13.0/bin/nvcc gives
CUDA_HOME=/usr/local, and the build then fails on `cuda_runtime_api.h: No such file or directory`).
`find_cuda_home` asks the nvcc itself instead: `nvcc --dryrun` prints the folder it runs from (`TOP=`).

Order: $CUDA_HOME, then $CUDA_PATH (taken as given: the user said so), then the toolkit of the `nvcc` on PATH,
then /usr/local/cuda. A toolkit is a folder with bin/nvcc and include/cuda_runtime_api.h.

Standard library only, and `find_cuda_home` is self-contained: `kbench export` copies its source into the
generated setup.py (engine/export/writer.py), so an exported package finds the toolkit exactly as kbench does.
"""

from __future__ import annotations

import os
import shutil
import subprocess


def find_cuda_home(environ=None):
    """(toolkit folder, how it was found) or (None, what was tried). `environ` defaults to os.environ."""
    env = os.environ if environ is None else environ

    def toolkit(folder):
        return bool(folder) and os.access(os.path.join(folder, "bin", "nvcc"), os.X_OK) and \
            os.path.isfile(os.path.join(folder, "include", "cuda_runtime_api.h"))

    for name in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(name):
            return env[name], f"${name}"
    nvcc = shutil.which("nvcc", path=env.get("PATH", os.defpath))
    if nvcc is not None:
        real = os.path.realpath(nvcc)
        above = os.path.dirname(os.path.dirname(real))
        if toolkit(above):
            return above, f"the nvcc on PATH, {nvcc}"
        try:   # a wrapper script: nvcc says where it runs from
            out = subprocess.run([nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                                 capture_output=True, text=True, timeout=60).stderr
        except (OSError, subprocess.SubprocessError):
            out = ""
        for line in out.splitlines():
            if line.startswith("#$ TOP="):
                top = os.path.realpath(line.split("=", 1)[1].strip())
                if toolkit(top):
                    return top, f"the nvcc on PATH, {nvcc}, which runs {top}/bin/nvcc"
    if toolkit("/usr/local/cuda"):
        return "/usr/local/cuda", "/usr/local/cuda"
    return None, ("no $CUDA_HOME or $CUDA_PATH, no nvcc on PATH that belongs to a toolkit, and no toolkit at "
                  "/usr/local/cuda")
