"""The Ray executor's start-up: connecting to the cluster (or starting a local instance), counting its GPUs and
CPUs, and asking one GPU node which architectures builds should target. Each failure is a KbenchError that
names the cluster and the cause in one paragraph.

With `ship_code` the driver's `engine/` package goes along in the job's runtime_env, so the nodes run the
driver's code rather than whatever kbench they have installed.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from engine.errors import KbenchError
from engine.evolve.ray.envelopes import ProbeReply
from engine.evolve.ray.tasks import probe_job, ray


def connect(address: str | None, ship_code: bool | None, init_kwargs: dict[str, Any] | None) -> bool:
    """Connect this process to Ray unless it already is; True when this call started (and so owns) it."""
    if ray.is_initialized():
        return False
    kw: dict[str, Any] = {"address": address, "include_dashboard": False, "log_to_driver": False,
                          "configure_logging": False, **(init_kwargs or {})}
    if ship_code if ship_code is not None else bool(address):
        kw.setdefault("runtime_env", {"py_modules": [str(Path(__file__).resolve().parents[1])]})
    try:
        _check_reachable(address)
        ray.init(**kw)
    except Exception as exc:  # noqa: BLE001 - say which cluster and why, in one paragraph
        where = address or "a new local Ray instance"
        raise KbenchError(f"cannot connect to the Ray cluster ({where}): {type(exc).__name__}: {exc}") from None
    return True


def gpus_and_cpus(gpu_resources: dict[str, Any]) -> tuple[int, int]:
    """The cluster's GPUs (or of the custom resource that stands for one) and CPUs; a cluster without a GPU
    is an error."""
    resources = ray.cluster_resources()
    gpu_key = next(iter(gpu_resources.get("resources", {}) or {}), None)
    gpus = int(resources.get(gpu_key, 0) if gpu_key else resources.get("GPU", 0))
    if gpus < 1:
        raise KbenchError(f"the Ray cluster has no GPU to evaluate on (its resources: {dict(resources)}); "
                          "start its GPU nodes with `ray start --num-gpus N`")
    return gpus, int(resources.get("CPU", 0))


def probe_archs(gpu_resources: dict[str, Any]) -> str:
    """The architectures of one GPU node, which builds on the CPU nodes target: a compile node's entry is then
    a cache hit on the GPU node when their toolchains agree."""
    probe = ray.remote(probe_job).options(max_retries=1, **gpu_resources)
    try:
        info = ray.get(probe.remote(), timeout=300)
    except Exception as exc:  # noqa: BLE001
        raise KbenchError(f"no GPU node of the Ray cluster answered: {type(exc).__name__}: {exc}") from None
    reply = ProbeReply.from_json(info)       # an EnvelopeError (a KbenchError): another kbench there
    if reply.error:
        raise KbenchError(f"the Ray GPU node {reply.where.host} cannot compile: {reply.error}")
    return reply.archs


def _check_reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """Ray keeps retrying an address nobody answers for minutes; a plain TCP connect says it at once."""
    if not address or address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return                     # a form we do not parse: let Ray judge it
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {host}:{port} ({exc.strerror or exc})") from None
