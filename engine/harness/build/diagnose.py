"""Reading compiler and linker output: the one-paragraph error (file:line, the source line, the cause) and
its failure kind, whether a failure looks transient, the link and export checks' messages, and the build log
(de-noised for BuildResult.log, complete for build.log). Split from engine/harness/build/stage.py.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from engine.harness.build.steps import FailureKind, StepResult, _Failed, compiler_env
from engine.harness.vendor_libs import cutlass_hint

LOG_LIMIT = 12_000         # characters of compiler output kept in BuildResult.log (head-heavy: errors come first)


# ---------------------------------------------------------------------------- checks after linking
_UNDEF = re.compile(r"undefined reference to [`'](?P<sym>.+?)'\s*$")
_MORE_UNDEF = re.compile(r"more undefined references to [`'](?P<sym>.+?)' follow")
_IN_FUNCTION = re.compile(r"^(?:.*ld(?:\.\w+)?: )?(?P<obj>[\w.\-]+\.o): in function [`'](?P<fn>.+?)':\s*$")
_PY_SYMBOL = re.compile(r"^_?Py|^_Py")


def _unresolved(output: str) -> list[tuple[str, str, str]]:
    """(symbol, object, function) for each non-Python symbol the linker could not resolve."""
    found: dict[str, tuple[str, str, str]] = {}
    obj, fn = "", ""
    for line in output.splitlines():
        if m := _IN_FUNCTION.match(line):
            obj, fn = m.group("obj"), m.group("fn")
        elif m := _UNDEF.search(line):
            sym = m.group("sym")
            if not _PY_SYMBOL.match(sym) and sym not in found:
                found[sym] = (sym, obj, fn)
    return list(found.values())


def _defined_functions(obj: Path) -> list[str]:
    nm = shutil.which("nm")
    if nm is None or not obj.is_file():
        return []
    try:
        out = subprocess.run([nm, "-C", "--defined-only", str(obj)], capture_output=True, text=True,
                             timeout=30, env=compiler_env()).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    # A __global__ kernel shows up as a host function too (its launch stub); only launchers are of interest.
    kernels = {m.group(2)[: int(m.group(1))] for m in re.finditer(r"__device_stub__Z(\d+)(\w+)", out)}
    names = []
    for line in out.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[1] in ("T", "W") and not parts[2].startswith(("__", "_GLOBAL")):
            if parts[2].split("(")[0] not in kernels:
                names.append(parts[2])
    return names


def _check_link(link: StepResult, work: Path, files: dict[str, str], objects: dict[str, Path]) -> None:
    if link.timed_out or link.rc != 0:
        raise _Failed(*_diagnose(link, work, files))
    missing = _unresolved(link.output)
    if not missing:
        return
    sym, obj, fn = missing[0]
    where = obj.replace(".o", ".cpp") if obj == "binding.o" else (obj or "an object")
    msg = (f"link failed: {where}" + (f" (in {fn})" if fn else "") + f" uses `{sym}`, which nothing defines.")
    if "kernel.o" in objects:
        defined = [d for d in _defined_functions(objects["kernel.o"]) if "(" in d and "<" not in d.split("(")[0]]
        msg += (" kernel.cu must define it with exactly this name and these parameter types (C++ mangles "
                "both into the symbol; an `extern \"C\"` on only one side also breaks it).")
        if defined:
            msg += " kernel.cu defines: " + "; ".join(defined[:8]) + "."
    if len(missing) > 1:
        msg += " Also undefined: " + ", ".join(f"`{m[0]}`" for m in missing[1:6]) + "."
    raise _Failed("link", msg)


def _check_export(so: Path, module_name: str, steps: list[StepResult], timings: dict[str, float]) -> None:
    """The .so must export PyInit_<module_name>, or Python cannot import it."""
    nm = shutil.which("nm")
    if nm is None:
        return
    t0 = time.monotonic()
    try:
        out = subprocess.run([nm, "-D", "--defined-only", str(so)], capture_output=True, text=True, timeout=30,
                             env=compiler_env()).stdout
    except (OSError, subprocess.SubprocessError):
        return
    timings["check"] = round(time.monotonic() - t0, 3)
    exported = re.findall(r"\bPyInit_(\w+)", out)
    if module_name in exported:
        return
    if exported:
        raise _Failed("link", f"the module exports PyInit_{exported[0]} but is loaded as {module_name}: "
                              "write PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) so the build can name it.")
    raise _Failed("link", "the module defines no Python entry point: the binding needs "
                          "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"forward\", &forward); }.")


# ---------------------------------------------------------------------------- diagnostics
_ERR_PATTERNS = (
    # nvcc front end: kernel.cu(12): error: identifier "foo" is undefined
    re.compile(r"^(?P<file>[^\s:][^:]*?)\((?P<line>\d+)\): (?:catastrophic error|error)(?: #\S+)?: ?(?P<msg>.*)$"),
    # gcc / g++ (also the host side of nvcc): binding.cpp:12:5: error: ...
    re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?:\d+:)? (?:fatal error|error): (?P<msg>.*)$"),
    re.compile(r"^(?P<file>ptxas|nvlink|nvcc) (?:fatal|error)\s*: (?P<msg>.*)$"),
    re.compile(r"^(?:\S*/)?ld(?:\.\w+)?: (?P<msg>(?:cannot find|.*error).*)$"),
    re.compile(r"^(?P<msg>.*(?:multiple definition of|undefined reference to) .*)$"),
)
_TRANSIENT = ("internal compiler error: Killed", "No space left on device", "Cannot allocate memory",
              "virtual memory exhausted", "out of memory", "Resource temporarily unavailable")


def _looks_transient(output: str) -> bool:
    return any(t in output for t in _TRANSIENT)


def _diagnose(step: StepResult, src: Path, files: dict[str, str]) -> tuple[FailureKind, str]:
    """One paragraph naming file:line and the cause, plus the failure kind."""
    what = step.name
    if step.timed_out:
        return "timeout", (f"{what} timed out after {step.timeout_s:.0f} s and its process group was killed. "
                           "Heavy templates or unrolling, or an overloaded machine; the failure was not cached, "
                           "so a retry compiles again.")
    if step.rc in (126, 127) and step.output.startswith("cannot run"):
        return "internal", f"{what}: {step.output.strip()}"
    if "Failed to preprocess host compiler properties" in step.output:  # nvcc could not run its host compiler
        return "internal", f"{what}: {_first_lines(step.output, 3)} (the host compiler is not usable here)"
    text = _clean(step.output, src)
    kind: FailureKind = "link" if what == "link" else "compile"
    if past := _past_a_limit(step):   # the candidate's doing, as deterministic as a compile error
        return kind, f"{what} {past}; {_first_lines(text, 2) or 'no output'}."
    if step.rc < 0 or _looks_transient(text):
        return "internal", (f"{what} was killed or ran out of resources (rc {step.rc}): "
                            f"{_first_lines(text, 3)}. Not cached; a retry may succeed.")
    lines = text.splitlines()
    n_errors, first = 0, None
    for i, line in enumerate(lines):
        for pat in _ERR_PATTERNS:
            if m := pat.match(line.strip()):
                n_errors += 1
                if first is None:
                    first = (i, m.groupdict())
                break
    if first is None:
        return kind, f"{what} failed (rc {step.rc}): {_first_lines(text, 4) or 'no output'}."
    i, g = first
    file, lineno, msg = g.get("file"), g.get("line"), (g.get("msg") or "").strip()
    where = f"{_short(file)}:{lineno}" if file and lineno else (file or what)
    out = f"{what} failed: {where}: {msg}"
    if file and lineno:
        src_line = _source_line(src, files, _short(file), int(lineno))
        if src_line is not None:
            out += f" — line {lineno} reads `{src_line.strip()}`"
        if _short(file) not in files:  # error inside a torch/CUDA header: name where the candidate reached it
            if reach := _candidate_location(lines, files):
                out += f" (reached from {reach})"
    out += "." if not out.endswith(".") else ""
    out += cutlass_hint(msg)
    if n_errors > 1:
        out += f" {n_errors} errors in all; the log shows each."
    return kind, out


def _short(path: str | None) -> str:
    if not path:
        return ""
    p = path[2:] if path.startswith("./") else path
    return p


def inside_without_links(path: Path, root: Path) -> bool:
    """`path` lies under `root` with neither of them a link. A KernelBench build folder is written by the
    candidate's import: a link there (or a linked folder, or a `..` in a name it chose) could point at one of
    the user's files, whose line would then be quoted into the verdict and a prompt."""
    return not path.is_symlink() and not root.is_symlink() and path.resolve().is_relative_to(root.resolve())


def _past_a_limit(step: StepResult) -> str:
    """How a jailed step went past a limit of its own (engine/jail/limits.py), from its supervisor's report and
    its end; "" where it did not."""
    report = step.report or {}
    if report.get("stopped") and not step.timed_out:
        return f"was stopped: {report['stopped']}"
    if step.rc == -signal.SIGXFSZ:
        return "wrote a file past its size limit (SIGXFSZ)"
    limit = (report.get("limits") or {}).get("memory") or 0
    peak = report.get("memory_peak") or 0
    if step.rc == -signal.SIGKILL and limit and peak >= 0.9 * limit:
        return f"ran out of its memory limit ({limit >> 20} MiB, the step's cgroup)"
    return ""


def _source_line(src: Path, files: dict[str, str], rel: str, lineno: int) -> str | None:
    if rel not in files:
        return None
    path = src / rel
    if not inside_without_links(path, src):
        return None
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    return lines[lineno - 1][:200] if 0 < lineno <= len(lines) else None


def _candidate_location(lines: list[str], files: dict[str, str]) -> str | None:
    names = "|".join(re.escape(f) for f in files)
    if not names:
        return None
    pat = re.compile(rf"(?<![\w/.])({names})(?::(\d+)|\((\d+)\))")
    for line in lines:
        if m := pat.search(line):
            return f"{m.group(1)}:{m.group(2) or m.group(3)}"
    return None


def _first_lines(text: str, n: int) -> str:
    keep = [l.strip() for l in text.splitlines() if l.strip()][:n]
    return " / ".join(keep)[:600]


def _tail(text: str, n: int) -> str:
    return text[-n:].strip()


# ---------------------------------------------------------------------------- logs
_H_LINE = re.compile(r"^(\.+|!|x) \S")


def _clean(output: str, base: Path) -> str:
    """Drop g++ -H listings and the linker's Python-API warnings; show paths relative to the build dir."""
    out: list[str] = []
    in_guards = False
    for line in output.splitlines():
        if _H_LINE.match(line):
            continue
        if line.startswith("Multiple include guards may be useful for:"):
            in_guards = True
            continue
        if in_guards and ": " not in line:
            continue
        in_guards = False
        if (m := _UNDEF.search(line) or _MORE_UNDEF.search(line)) and _PY_SYMBOL.match(m.group("sym")):
            continue
        if _IN_FUNCTION.match(line):
            continue  # kept only when followed by a real undefined reference (re-added below)
        out.append(line)
    text = "\n".join(out)
    for prefix in (str(base / "src") + "/", str(base) + "/", str(base.parent) + "/"):
        text = text.replace(prefix, "")
    return text


def _render_log(steps: list[StepResult], work: Path) -> str:
    parts = []
    for s in steps:
        status = "timed out" if s.timed_out else f"rc {s.rc}"
        body = _clean(s.output, work).strip()
        if s.name == "link" and (missing := _unresolved(s.output)):
            body = "\n".join(f"{obj}: in {fn}: undefined reference to `{sym}'" for sym, obj, fn in missing)
        parts.append(f"== {s.name} ({s.seconds:.1f} s, {status})" + (f"\n{body}" if body else ""))
    text = "\n".join(parts)
    if len(text) > LOG_LIMIT:
        head, tail = text[: LOG_LIMIT * 3 // 4], text[-LOG_LIMIT // 5:]
        text = f"{head}\n... [{len(text) - len(head) - len(tail)} characters trimmed] ...\n{tail}"
    return text


def _full_log(steps: list[StepResult]) -> str:
    parts = []
    for s in steps:
        head = f"$ {' '.join(s.cmd)}\n" if s.cmd else ""  # a step that ran no command (a cached object, a note)
        jail = (s.report.get("jail") or {}).get("summary") if s.report else None
        stopped = s.report.get("stopped") if s.report else ""
        parts.append(f"{head}# {s.name}: rc {s.rc}, {s.seconds:.2f} s{', timed out' if s.timed_out else ''}\n"
                     + (f"# jail: {jail}\n" if jail else "") + (f"# stopped: {stopped}\n" if stopped else "")
                     + s.output)
    return "\n\n".join(parts)
