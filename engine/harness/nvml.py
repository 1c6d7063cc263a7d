"""What kbench asks the driver about the GPUs, through NVML (nvidia-ml-py's `pynvml`) instead of parsing
nvidia-smi's output. NVML creates no CUDA context, so a process that forks sandbox children may call it.

Fallback: where pynvml is not installed, or NVML does not initialise (no driver, a CI machine, a container
without libnvidia-ml), or a query fails, every function answers as on a machine without a GPU (None, an empty
list or dict), which is what the callers did when nvidia-smi was missing. Indices are NVML's, the same as
nvidia-smi's (PCI bus order; CUDA_VISIBLE_DEVICES is not applied here).

Lazy imports: pynvml, in each call: it is optional (the fallback above), and the CLI loads this module at start-up.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def _query(fn: Callable[[Any], T]) -> T | None:
    """fn(pynvml) between nvmlInit and nvmlShutdown; None where pynvml or NVML is unavailable or fn fails."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError):
        return None
    try:
        return fn(pynvml)
    except (pynvml.NVMLError, OSError):
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except (pynvml.NVMLError, OSError):
            pass


@contextmanager
def held() -> Iterator[None]:
    """NVML kept initialised for the block, so that the queries in it (a sampler's, every few hundred ms) do not
    each attach to the driver anew: NVML counts initialisations and only the last shutdown tears down."""
    try:
        import pynvml
    except ImportError:
        yield
        return
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError):   # the queries in the block answer None, as they would anyway
        yield
        return
    try:
        yield
    finally:
        try:
            pynvml.nvmlShutdown()
        except (pynvml.NVMLError, OSError):
            pass


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)    # older pynvml returned bytes


def driver_version() -> str | None:
    return _query(lambda nv: _text(nv.nvmlSystemGetDriverVersion()))


def gpu_count() -> int:
    return _query(lambda nv: int(nv.nvmlDeviceGetCount())) or 0


def gpu_name(index: int = 0) -> str | None:
    return _query(lambda nv: _text(nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(index))))


def compute_capabilities() -> dict[int, str]:
    """NVML index -> compute capability ('9.0') of every GPU on the machine."""
    def caps(nv: Any) -> dict[int, str]:
        out = {}
        for i in range(nv.nvmlDeviceGetCount()):
            major, minor = nv.nvmlDeviceGetCudaComputeCapability(nv.nvmlDeviceGetHandleByIndex(i))
            out[i] = f"{major}.{minor}"
        return out
    return _query(caps) or {}


def memory_by_process(pci_bus_id: str) -> dict[int, int] | None:
    """pid -> bytes of GPU memory held by each process with a compute context on the GPU at `pci_bus_id`
    (torch's `pci_bus_id` form, e.g. "00000000:1B:00.0"); None where NVML cannot say."""
    def held(nv: Any) -> dict[int, int]:
        handle = nv.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode() if isinstance(pci_bus_id, str) else pci_bus_id)
        return {int(p.pid): int(p.usedGpuMemory or 0) for p in nv.nvmlDeviceGetComputeRunningProcesses(handle)}
    return _query(held)


def sm_use_by_process(pci_bus_id: str, since_us: int) -> dict[int, int] | None:
    """pid -> the highest SM utilisation (%) NVML sampled for each process on the GPU at `pci_bus_id` since
    `since_us` (microseconds since the epoch); {} where NVML kept no sample since then; None where it cannot
    say (no NVML, a GPU or driver without per-process accounting)."""
    def use(nv: Any) -> dict[int, int]:
        handle = nv.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode() if isinstance(pci_bus_id, str) else pci_bus_id)
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(handle, int(since_us))
        except nv.NVMLError_NotFound:
            return {}
        out: dict[int, int] = {}
        for s in samples:
            out[int(s.pid)] = max(out.get(int(s.pid), 0), int(s.smUtil))
        return out
    return _query(use)


def gpu_utilization(indices: list[int] | None = None) -> dict[int, int] | None:
    """NVML index -> GPU utilisation (%) over NVML's last sample period (nvidia-smi's `utilization.gpu`: the share
    of that period in which a kernel ran) for each GPU of `indices` (default: every GPU on the machine); None
    where NVML cannot say."""
    def util(nv: Any) -> dict[int, int]:
        wanted = range(nv.nvmlDeviceGetCount()) if indices is None else indices
        return {int(i): int(nv.nvmlDeviceGetUtilizationRates(nv.nvmlDeviceGetHandleByIndex(int(i))).gpu)
                for i in wanted}
    return _query(util)
