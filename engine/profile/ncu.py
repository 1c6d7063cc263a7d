"""Nsight Compute: the command line kbench runs and a parser for its `--csv --page details` output.

One CSV row per (kernel launch, section, metric): columns "ID", "Process ID", "Process Name", "Host Name",
"Kernel Name", "Context", "Stream", "Block Size", "Grid Size", "Device", "CC", "Section Name",
"Metric Name", "Metric Unit", "Metric Value". Metrics asked for with `--metrics` land in the section
"Command line profiler metrics" under their raw names (e.g. the warp stall ratios).
"""

from __future__ import annotations

import csv
import glob
import io
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field

SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "MemoryWorkloadAnalysis",
            "ComputeWorkloadAnalysis")

# Warp stall reasons: average warps stalled per issued instruction, one metric per reason.
STALL_REASONS = ("long_scoreboard", "short_scoreboard", "mio_throttle", "lg_throttle", "math_pipe_throttle",
                 "wait", "barrier", "membar", "not_selected", "selected", "dispatch_stall", "drain",
                 "imc_miss", "no_instruction", "branch_resolving", "sleeping", "tex_throttle", "misc")
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
# fp32 instruction counts: flops = fadd + fmul + 2 * ffma (thread-level, predicated-on).
FLOP_METRICS = {"fadd": "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
                "fmul": "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
                "ffma": "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"}

# Kernels that are not the candidate's: the timer's L2 flush (`zero_` on a buffer: an at::native fill),
# input initialisation (at::native distribution / elementwise kernels) and any other torch-internal kernel.
# Namespaced names only, so a candidate's own `fill_kernel` or `reduce_kernel` is still profiled.
EXCLUDED_KERNELS = ("at::native::", "at_cuda_detail::", "l2_flush", "flush_l2")

PERMISSION_MARKER = "ERR_NVGPUCTRPERM"
# The profile child wraps the candidate's calls in this NVTX push/pop range; ncu profiles only inside it,
# so set-up work (a backward task's reference forward, cuBLAS included) is never mistaken for the candidate.
NVTX_RANGE = "kbench_candidate"


def ncu_unavailable_reason(ncu: str | None = None) -> str | None:
    """Why ncu cannot run here (None: it can be tried)."""
    if ncu is None and shutil.which("ncu") is None:
        return "ncu (Nsight Compute) not found on PATH"
    return None


def ncu_install_dirs(ncu: str = "ncu", standalone_root: str = "/opt/nvidia/nsight-compute") -> list[str]:
    """What of Nsight Compute the profiled process's jail must read: ncu preloads its injection library (from
    <install>/target/<platform>/) into the process it profiles, after that process's jail is applied. The
    `target` folders of: the install holding the resolved ncu binary, the installs a launcher script (the CUDA
    toolkit's bin/ncu) names, and the standalone installs under /opt/nvidia/nsight-compute. Only `target`: the
    folder ncu sits in may be a user's own (~/bin), and nothing else of it is needed."""
    path = shutil.which(ncu)
    installs: list[str] = []
    if path:
        real = os.path.realpath(path)
        installs.append(os.path.dirname(real))
        try:
            with open(real, "rb") as f:
                head = f.read(16384)
        except OSError:
            head = b""
        if head.startswith(b"#!"):   # a launcher script: the real install is named inside
            for m in re.findall(rb"/[\w.+/-]+", head):
                named = m.decode(errors="replace").rstrip("/")
                if "nsight-compute" in named and os.path.exists(named):
                    installs.append(named if os.path.isdir(named) else os.path.dirname(named))
    installs += sorted(glob.glob(os.path.join(standalone_root, "*")))
    targets = (os.path.join(os.path.realpath(d), "target") for d in installs)
    return [t for t in dict.fromkeys(targets) if os.path.isdir(t)]


def kernel_filter_regex(excluded: Sequence[str] = EXCLUDED_KERNELS) -> str:
    """A `--kernel-name regex:` value matching any kernel whose name contains none of `excluded`."""
    alternatives = "|".join(re.escape(x) for x in excluded)
    return f"regex:^(?!.*({alternatives})).*$"


def build_ncu_command(driver: Sequence[str], *, ncu: str = "ncu", launch_count: int = 3,
                      launch_skip: int = 0, sections: Sequence[str] = SECTIONS,
                      kernel_regex: str | None = None, extra_metrics: bool = True,
                      nvtx_range: str | None = NVTX_RANGE) -> list[str]:
    """The ncu command line that profiles `driver` (a command running the candidate on one config)."""
    cmd = [ncu, "--csv", "--page", "details", "--print-units", "base", "--target-processes", "all"]
    for s in sections:
        cmd += ["--section", s]
    if extra_metrics:
        cmd += ["--metrics", ",".join([STALL_METRIC.format(r) for r in STALL_REASONS] + list(FLOP_METRICS.values()))]
    if nvtx_range:
        cmd += ["--nvtx", "--nvtx-include", f"{nvtx_range}/"]
    cmd += ["--kernel-name", kernel_regex or kernel_filter_regex(), "--launch-skip", str(launch_skip),
            "--launch-count", str(launch_count)]
    return cmd + list(driver)


@dataclass
class NcuMetric:
    section: str
    name: str
    unit: str
    value: float | str


@dataclass
class NcuKernel:
    """One profiled launch: its identity and every metric ncu printed, by (section, name)."""

    id: int
    name: str
    block: str = ""
    grid: str = ""
    device: str = ""
    cc: str = ""
    metrics: dict[tuple[str, str], NcuMetric] = field(default_factory=dict)

    def get(self, name: str, section: str | None = None) -> NcuMetric | None:
        if section is not None:
            return self.metrics.get((section, name))
        for (_, n), m in self.metrics.items():
            if n == name:
                return m
        return None

    def number(self, name: str, section: str | None = None) -> float | None:
        m = self.get(name, section)
        return m.value if m is not None and isinstance(m.value, float) else None

    def short_name(self) -> str:
        base = self.name.split("(")[0].split("<")[0].strip()
        return base.rsplit(" ", 1)[-1] or self.name


def _number(text: str) -> float | str:
    t = text.strip().replace(",", "")
    try:
        return float(t)
    except ValueError:
        return text.strip()


def parse_ncu_csv(text: str) -> list[NcuKernel]:
    """Kernels from `ncu --csv --page details` output; lines before the CSV header (==PROF== and the
    program's own output) are skipped."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    kernels: dict[int, NcuKernel] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        try:
            kid = int(row["ID"])
        except (KeyError, TypeError, ValueError):
            continue
        k = kernels.get(kid)
        if k is None:
            k = kernels[kid] = NcuKernel(id=kid, name=row.get("Kernel Name") or "", block=row.get("Block Size") or "",
                                         grid=row.get("Grid Size") or "", device=row.get("Device") or "",
                                         cc=row.get("CC") or "")
        section, name = row.get("Section Name") or "", row.get("Metric Name") or ""
        if name:
            k.metrics[(section, name)] = NcuMetric(section, name, row.get("Metric Unit") or "",
                                                   _number(row.get("Metric Value") or ""))
    return [kernels[i] for i in sorted(kernels)]


def permission_denied(output: str) -> bool:
    return PERMISSION_MARKER in output
