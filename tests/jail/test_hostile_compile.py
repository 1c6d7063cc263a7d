"""A candidate that makes the compiler read root's files: the static scan names the plain forms before anything is
compiled (`foreign-file`), and the forms it cannot see (a computed #include, a stringised .incbin path) meet the
compilers' jail, which grants no /etc beyond what compilers read and runs them without root's capabilities; no
line of /etc/shadow reaches the output, the build log or the built library. The build cache is the user's alone.
The installed `kbench eval` with a HOME of the test's own; root only (it reads /etc/shadow to know what must not
appear). CPU: nvcc and g++ run, nothing is measured (exit 3 where a candidate compiles)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from engine.harness.build.steps import run_tool
from engine.jail import JailSpec
from engine.jail.limits import COMPILE
from engine.jail.profiles import PROC_FILES, SYSTEM_CODE, etc_files
from tests.conftest import HAS_NVCC
from tests.paths import REPO
from tests.user_kbench import kbench

BASELINE = REPO / "tasks" / "gelu_bias" / "baselines" / "forward"


def shadow_lines() -> list[str]:
    try:
        text = Path("/etc/shadow").read_text()
    except OSError:
        pytest.skip("needs root (the test reads /etc/shadow to know what must not leak)")
    return [ln.strip() for ln in text.splitlines() if len(ln.strip()) >= 8]


def candidate(tmp_path: Path, name: str, prefix: str = "", suffix: str = "") -> Path:
    folder = tmp_path / name
    shutil.copytree(BASELINE, folder)
    kernel = folder / "kernel.cu"
    kernel.write_text(prefix + kernel.read_text() + suffix)
    return folder


@pytest.fixture(scope="module")
def cache(tmp_path_factory, prebuilt_pch):
    """One build cache for the module, holding the run's precompiled header (tests/prebuilt_pch.py): the .gch
    is torch's headers, not the user's, and rebuilding it per test only cost time."""
    from tests.prebuilt_pch import seed_pch

    return seed_pch(tmp_path_factory.mktemp("kbench-cache") / "cache")


def leaks(text: str, secrets: list[str]) -> list[str]:
    return [s for s in secrets if s in text or s.split(":", 1)[-1][:20] in text]


PLAIN = {
    "line": '#line 5 "/etc/shadow"\n#error five\n',
    "embed": 'static const char data[] = {\n#embed "/etc/shadow"\n};\n',
    "has_include": '#if __has_include("/etc/shadow")\n#define HAVE 1\n#endif\n',
    "include_outside": '#include "../../../etc/shadow"\n',
    "incbin": 'asm(".section .rodata\\n.incbin \\"/etc/shadow\\"\\n.previous");\n',
}


@pytest.mark.parametrize("form", sorted(PLAIN))
def test_the_static_scan_fails_a_candidate_that_names_a_file_outside_its_folder(tmp_path, form):
    folder = candidate(tmp_path, form, prefix=PLAIN[form])
    out = kbench(tmp_path / "home", "eval", "gelu_bias", str(folder), "--no-timing", timeout=120,
                 env={"KBENCH_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 1, out.stdout + out.stderr
    static = next(ln for ln in out.stdout.splitlines() if ln.strip().startswith("static"))
    assert "FAIL" in static and "foreign-file" in static, out.stdout
    assert "compile      SKIPPED" in out.stdout or "compile      SKIP" in out.stdout, out.stdout
    assert not leaks(out.stdout + out.stderr, shadow_lines())


HIDDEN = {   # what the scan cannot resolve: the compilers' jail must hold
    "computed_include": ('#define SECRET "/etc/shadow"\n#include SECRET\n', ""),
    "stringised_incbin": ('#define STR(x) #x\n#define XSTR(x) STR(x)\n',
                          '\nasm(".section .rodata\\n.incbin \\"" XSTR(/etc/shadow) "\\"\\n.previous");\n'),
}


@pytest.mark.skipif(not HAS_NVCC, reason="needs nvcc (set CUDA_HOME)")
@pytest.mark.parametrize("form", sorted(HIDDEN))
def test_the_compilers_jail_keeps_root_only_files_out_of_logs_and_libraries(tmp_path, cache, form):
    secrets = shadow_lines()
    prefix, suffix = HIDDEN[form]
    folder = candidate(tmp_path, form, prefix, suffix)
    out = kbench(tmp_path / "home", "eval", "gelu_bias", str(folder), "--no-timing", timeout=1800,
                 env={"KBENCH_CACHE": str(cache)})
    text = out.stdout + out.stderr
    assert out.returncode == 1 and "Traceback" not in text, text
    assert "compile      FAIL" in out.stdout, out.stdout
    assert "/etc/shadow" in text and ("Permission denied" in text or "not found" in text), text
    assert not leaks(text, secrets), text
    for path in cache.rglob("*"):        # the build log, result.json, any object or library kept
        if path.is_file() and not path.name.endswith(".gch"):
            data = path.read_bytes()
            assert not [s for s in secrets if s.encode() in data], path


@pytest.mark.skipif(not HAS_NVCC, reason="needs nvcc (set CUDA_HOME)")
def test_the_build_cache_is_the_users_alone(tmp_path, cache):
    folder = candidate(tmp_path, "plain", suffix="\n// the cache test's own source\n")
    out = kbench(tmp_path / "home", "eval", "gelu_bias", str(folder), "--no-timing", timeout=1800,
                 env={"KBENCH_CACHE": str(cache)})
    assert out.returncode == 3, out.stdout + out.stderr      # compiled; no GPU here to measure it
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    kept = [p for p in (cache / "builds").rglob("*") if p.is_file()] + \
        [p for p in (cache / "objects").rglob("*") if p.is_file()]
    assert any(p.suffix == ".so" for p in kept)
    for p in kept:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    for d in [d for d in (cache / "builds").rglob("*") if d.is_dir()]:
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    # an older kbench's cache, open to all, is closed again on the next build
    os.chmod(cache, 0o755)
    assert kbench(tmp_path / "home", "eval", "gelu_bias", str(folder), "--no-timing", timeout=600,
                  env={"KBENCH_CACHE": str(cache)}).returncode == 3
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700


def test_a_compiler_becomes_uid_65534_where_that_uid_can_read_what_it_needs(tmp_path):
    """The runner's rule for compilers too: where uid 65534 can read the programs and reach the build folder, the
    folder is handed to it and the step runs as it (this machine's Python under /root keeps kbench's compilers
    at uid 0 without capabilities; a toolchain in /usr does not)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (the uid change)")
    top = Path(tempfile.mkdtemp(prefix="kbench-test-"))
    try:
        os.chmod(top, 0o711)
        work = top / "work"
        work.mkdir(mode=0o700)
        spec = JailSpec(read_exec=SYSTEM_CODE, read=(*etc_files(), *PROC_FILES), write=(str(work),),
                        devices=("/dev/null",), drop_privileges=True, die_with_parent=True, needed_by_nobody=("/usr", "/bin", str(work)),
                        limits=COMPILE.to_json())
        step = run_tool(["/bin/sh", "-c", "id -u; grep CapEff /proc/$$/status; echo built > out.o"], work, 60,
                        "sh", spec)
        assert step.ok, step.output
        assert step.output.split()[0] == "65534" and "0000000000000000" in step.output, step.output
        assert (work / "out.o").stat().st_uid == 65534
        assert "uid 65534" in step.report["jail"]["identity"]
    finally:
        shutil.rmtree(top, ignore_errors=True)
