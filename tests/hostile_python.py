"""What a hostile candidate's Python does, one attack per body, shared by the tests that run it where kbench runs
candidate code: the KernelBench import child at the compile stage (tests/jail/test_step_limits.py, CPU) and the
runner (tests/integrity/test_gpu_hostile_runner.py, GPU). Each body raises with what it achieved (the verdict
quotes it), or ends quietly where the test checks something else (a daemon, an output flood). `os`, `sys` and
`time` are imported by the file the body goes into."""

from __future__ import annotations

READ_ROOT_FILE = """
caps = [ln for ln in open("/proc/self/status") if ln.startswith("CapEff")][0].split()[1]
try:
    got = open("/etc/shadow").read()[:40]
except OSError as exc:
    got = f"refused ({exc.strerror})"
raise RuntimeError(f"uid {os.getuid()} caps {caps} shadow: {got}")
"""


def fork_storm(count: int) -> str:
    return f"""
n = 0
for _ in range({count}):
    try:
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
    except OSError:
        break
    n += 1
raise RuntimeError(f"forked {{n}}")
"""


def hold_memory(blocks: int, block_mib: int) -> str:
    return f"""
held = []
for _ in range({blocks}):
    held.append(bytearray({block_mib} << 20))     # touched: bytearray zeroes it
raise RuntimeError(f"held {{len(held) * {block_mib}}} MiB")
"""


def one_big_file(mib: int) -> str:
    return f"""
with open(os.path.join(os.environ["HOME"], "big"), "wb") as f:
    for _ in range({mib // 16}):
        f.write(b"\\0" * (16 << 20))
raise RuntimeError("wrote {mib} MiB in one file")
"""


def many_files(count: int, mib: int) -> str:
    return f"""
for i in range({count}):
    with open(os.path.join(os.environ["HOME"], f"part{{i}}"), "wb") as f:
        f.write(b"\\1" * ({mib} << 20))
time.sleep(5)
raise RuntimeError("wrote {count} files of {mib} MiB")
"""


def daemon(seconds: str) -> str:
    """A `setsid` daemon that runs `sleep SECONDS` (the test looks for that command line)."""
    return f"""
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "{seconds}"])
    os._exit(0)
time.sleep(1)
"""


def output_flood(mib: int) -> str:
    return f"""
chunk = "x" * (1 << 20)
for _ in range({mib}):
    sys.stdout.write(chunk)
sys.stdout.flush()
"""


def forked(reason: str) -> int:
    """The count a fork_storm body raised with, from the verdict's reason."""
    return int(reason.split("forked ")[1].split()[0].rstrip(".,"))
