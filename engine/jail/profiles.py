"""The jails kbench uses: what a runner (candidate code) and a compiler may touch on this machine.

Everything not listed is closed: the user's home and dotfiles, the working directory, the workspace and its
.git, other processes' /proc entries, the build cache (a runner gets copies of what it loads in a folder it
cannot write), and the network.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import site
import sys
import sysconfig
from dataclasses import replace
from pathlib import Path

from engine.cuda_home import find_cuda_home
from engine.jail import JailSpec, limits, privileges

# System directories holding programs and libraries (no user data by convention). Not /etc: it holds root-only
# files (/etc/shadow, ssh host keys, sudoers) that uid 0 without capabilities still reads as their owner; only
# the configuration a compiler, Python, torch and the CUDA driver read is granted (ETC_READ).
SYSTEM_CODE = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin")
ETC_READ = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ld.so.preload", "/etc/localtime",
            "/etc/timezone", "/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/host.conf", "/etc/hosts",
            "/etc/resolv.conf", "/etc/gai.conf", "/etc/os-release", "/etc/lsb-release", "/etc/debian_version",
            "/etc/redhat-release", "/etc/alternatives", "/etc/mime.types", "/etc/locale.alias", "/etc/nvidia",
            "/etc/OpenCL", "/etc/vulkan", "/etc/glvnd", "/etc/ssl/openssl.cnf")
# /proc entries a process needs about itself and the machine; never another process's directory.
PROC_FILES = ("/proc/self", "/proc/thread-self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/version",
              "/proc/filesystems", "/proc/loadavg", "/proc/uptime", "/proc/devices", "/proc/modules",
              "/proc/sys", "/proc/driver")
DEVICE_READ = ("/dev/urandom", "/dev/random", "/dev/zero", "/dev/full")


def _real(paths: list[str]) -> list[str]:
    """Resolved, existing, de-duplicated paths, outermost first (a path inside another listed one is dropped)."""
    out: list[str] = []
    for p in sorted({os.path.realpath(p) for p in paths if p and os.path.exists(p)}, key=len):
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return out


def python_code_paths() -> list[str]:
    """Where this Python and its packages live: prefixes, the stdlib, site-packages, the interpreter."""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable))]
    for key in ("stdlib", "platstdlib", "purelib", "platlib", "include"):
        paths.append(sysconfig.get_path(key) or "")
    try:
        paths += site.getsitepackages()
    except AttributeError:  # some virtualenvs
        pass
    if site.ENABLE_USER_SITE and site.USER_SITE:
        paths.append(site.USER_SITE)
    return paths


def engine_dir() -> str:
    """kbench's own engine package (the runner imports it); not the checkout around it."""
    return str(Path(__file__).resolve().parents[1])


def cuda_home() -> str:
    """The toolkit the builds use (engine/cuda_home.py), so the jail grants the folder nvcc runs from: an nvcc on
    PATH that belongs to /opt/cuda-13.0 is not under /usr/local/cuda. Asked once per environment (the rule may run
    `nvcc --dryrun`)."""
    return _toolkit(os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), os.environ.get("PATH"))


@functools.lru_cache(maxsize=8)
def _toolkit(*_env_that_decides: str | None) -> str:
    return find_cuda_home()[0] or "/usr/local/cuda"


def install_prefix(program: str | None) -> str:
    """Where a program is installed: /opt/gcc for /opt/gcc/bin/g++ (its libexec and headers live there)."""
    path = shutil.which(program) if program else None
    if not path:
        return ""
    d = os.path.dirname(os.path.realpath(path))
    return os.path.dirname(d) if os.path.basename(d) == "bin" else d


def compiler_paths() -> list[str]:
    """The host compilers nvcc and load_inline may call, wherever they are installed."""
    names = [os.environ.get("CXX"), os.environ.get("CC"), "c++", "g++", "gcc", "cc", "ninja"]
    return [p for p in (install_prefix(n) for n in names) if p]


def _code_paths() -> list[str]:
    return _real([*SYSTEM_CODE, *python_code_paths(), engine_dir(), cuda_home(), *compiler_paths()])


def etc_files() -> list[str]:
    """The /etc entries of ETC_READ present here, as they are named (a link in /etc is granted where it points:
    Landlock checks the file opened, so its target must be granted too, and a target in /etc is)."""
    found = [p for p in ETC_READ if os.path.lexists(p)]
    targets = [os.path.realpath(p) for p in found]
    return _real([*found, *(t for t in targets if not t.startswith("/etc/") or t in found)])


def runner_spec(scratch: Path, readonly: list[Path], *, gpu_devices: bool = True,
                step_limits: limits.Limits | None = None) -> JailSpec:
    """Candidate code: read the code of the machine, its own read-only folder (the candidate's .so, the timing
    helper), write only `scratch`, open the GPU; nothing else."""
    devices = ["/dev/null"]
    if gpu_devices:
        devices += sorted(glob.glob("/dev/nvidia*"))
        devices += [p for p in ("/dev/nvidia-caps",) if os.path.isdir(p)]
    code = _code_paths()
    return JailSpec(
        read_exec=tuple(code),
        read=tuple([*etc_files(), *PROC_FILES, "/sys", *DEVICE_READ, *(str(p) for p in readonly)]),
        write=(str(scratch),),
        devices=tuple(devices), own_proc_writable=gpu_devices,
        network_namespace=True, seccomp=True, allow_unix_sockets=gpu_devices, drop_privileges=True,
        needed_by_nobody=tuple([*code, *(str(p) for p in readonly)]),
        limits=(step_limits or limits.runner_limits()).to_json(),
    )


def profiled_spec(runner: JailSpec, profiler_dirs: list[str]) -> JailSpec:
    """A runner's jail for a process ncu profiles: it also reads ncu's injection library (`profiler_dirs`), and it
    has no network namespace. ncu's front end, outside the jail, attaches to the injection in the profiled process
    through a local socket that the namespace cuts off: with it, ncu and the process wait for each other until
    the time limit (measured on an H100: no result in 60 s with the namespace, a profile in 9 s without). The
    network stays closed without the namespace: seccomp lets no socket but AF_UNIX be made and none connect or
    sendto an address; Landlock denies TCP and scopes abstract unix sockets (apply() lists a missing scope when
    there is no namespace). So every other layer must hold: the launcher refuses to run the program where one
    is missing (refuse_incomplete)."""
    return replace(runner, read=(*runner.read, *profiler_dirs), network_namespace=False, refuse_incomplete=True)


def compiler_spec(workdir: Path, readonly: list[Path], programs: list[str] = (),
                  step_limits: limits.Limits = limits.COMPILE) -> JailSpec:
    """nvcc / g++ / the linker on one candidate, or the import of a KernelBench candidate (which runs its Python):
    read the toolchain and `readonly` (the candidate's sources, the precompiled header), write only `workdir`. A
    `#include "/home/..."` or `"/etc/shadow"` reads nothing, so nothing a compiler prints can carry a user's or
    root's file into a log, a note or a prompt. It drops root as a runner does: uid 65534 where that uid can
    read everything it needs (the toolchain, `readonly`, `workdir`), else uid 0 without capabilities; no
    network, no other process, bounded (`step_limits`, engine/jail/limits.py), and it dies with its supervisor.
    `programs`: the toolchain's compilers, whose install prefixes it may read and run."""
    code = _real([*_code_paths(), *(install_prefix(p) for p in programs)])
    return JailSpec(
        read_exec=tuple(code),
        read=tuple([*etc_files(), *PROC_FILES, *DEVICE_READ, *(str(p) for p in readonly)]),
        write=(str(workdir),),
        devices=("/dev/null",),
        network_namespace=True, seccomp=True, allow_unix_sockets=False, drop_privileges=True,
        die_with_parent=True, needed_by_nobody=tuple([*code, *(str(p) for p in readonly), str(workdir)]),
        limits=step_limits.to_json(),
    )


def hand_over(spec: JailSpec) -> bool:
    """Where a process jailed in `spec` by root will become uid 65534 (drop_privileges' rule: that uid can read
    all it needs), give it the folders it writes first (chown -R), which makes them pass that rule too; where it
    will not (something it needs is closed to that uid, or a folder it writes lies beyond one, as a cache under
    /root does), leave them as they are: it then stays uid 0 without capabilities. True where handed over."""
    if os.geteuid() != 0 or not spec.drop_privileges:
        return False
    needed = [p for p in spec.needed_by_nobody if p not in spec.write and os.path.exists(p)]
    if not all(privileges.readable_by_nobody(p) for p in needed):
        return False
    if not all(privileges.reachable_by_nobody(w) for w in spec.write):
        return False
    for w in spec.write:
        for root, dirs, files in os.walk(w):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.chown(name, privileges.NOBODY, privileges.NOBODY, follow_symlinks=False)
    return True


def runner_environment(scratch: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a jailed runner: every home, cache and temp path points into its scratch."""
    env = {k: v for k, v in os.environ.items()
           if k in ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
                    "CUDA_VISIBLE_DEVICES", "TORCH_CUDA_ARCH_LIST", "CUDA_MODULE_LOADING")
           or k.startswith("NVIDIA_")}
    s = str(scratch)
    env.update({"HOME": s, "TMPDIR": s, "XDG_CACHE_HOME": f"{s}/.cache", "TORCH_EXTENSIONS_DIR": f"{s}/torch_ext",
                "TRITON_CACHE_DIR": f"{s}/.triton", "TORCHINDUCTOR_CACHE_DIR": f"{s}/.inductor",
                "CUDA_CACHE_PATH": f"{s}/.nv", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
                "PYTHONNOUSERSITE": "1", "PYTHONPATH": str(Path(engine_dir()).parent)})
    env.update(extra or {})
    return env
