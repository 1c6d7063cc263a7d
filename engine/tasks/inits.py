"""Input initialisation schemes named by a config's `init`. Applied in the sandbox, seeded per config.

Each tensor is redrawn where it lies: a CPU tensor from a CPU generator in float64 (the values kbench has
always drawn), a CUDA tensor from a generator on its device in its own precision (float32 for the half types),
so a GiB input is never drawn on the host and copied. The distributions are the same; the values differ
between the two (each device has its own generator). This file is also copied as is into exported packages:
it imports nothing but torch.

Lazy imports: torch, in apply_init: the task loader imports this module (engine.tasks.native), and the CLI and the
app load the task loader at start-up.
"""

from __future__ import annotations

from typing import Any, Callable

SCHEMES = ("normal", "uniform", "wide", "offset", "small", "sparse", "large")


def apply_init(inputs: list[Any], scheme: str, seed: int) -> list[Any]:
    """Rewrite the floating-point tensors among `inputs` in place of the generated ones; others untouched."""
    import torch

    if scheme not in SCHEMES:
        raise ValueError(f"unknown init scheme {scheme!r} (known: {', '.join(SCHEMES)})")
    if scheme == "normal":
        return list(inputs)
    generators: dict[Any, "torch.Generator"] = {}  # one stream per device, each seeded as the CPU one always was

    def source(t: "torch.Tensor") -> tuple["torch.Generator", "torch.device", "torch.dtype"]:
        """The generator, device and precision `t`'s values are drawn with."""
        if t.device.type == "cuda":
            dev = t.device
            dtype = t.dtype if t.dtype in (torch.float32, torch.float64) else torch.float32
        else:
            dev, dtype = torch.device("cpu"), torch.float64
        if dev not in generators:
            generators[dev] = torch.Generator(device=dev).manual_seed(seed * 7919 + 17)
        return generators[dev], dev, dtype

    def randn(t: "torch.Tensor") -> "torch.Tensor":
        gen, dev, dtype = source(t)
        return torch.randn(t.shape, generator=gen, dtype=dtype, device=dev).to(device=t.device, dtype=t.dtype)

    def uniform(t: "torch.Tensor") -> "torch.Tensor":
        gen, dev, dtype = source(t)
        u = torch.rand(t.shape, generator=gen, dtype=dtype, device=dev)
        return u.mul_(2).sub_(1).to(device=t.device, dtype=t.dtype)

    def sparse(t: "torch.Tensor") -> "torch.Tensor":
        x = randn(t)
        gen, dev, _ = source(t)
        keep = torch.rand(t.shape, generator=gen, device=dev) > 0.5
        return x.mul_(keep.to(device=t.device, dtype=t.dtype))

    # (in place on the fresh draw: no temporaries the size of the input)
    makers: dict[str, Callable[["torch.Tensor"], "torch.Tensor"]] = {
        "uniform": uniform,
        "wide": lambda t: randn(t).mul_(8),
        "offset": lambda t: randn(t).mul_(0.5).add_(3),
        "small": lambda t: randn(t).mul_(1e-3),
        # exp() of these overflows fp32: catches softmax/log-sum-exp without max subtraction
        "large": lambda t: randn(t).mul_(30).add_(100),
        "sparse": sparse,
    }
    out = []
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            out.append(makers[scheme](t).contiguous())
        else:
            out.append(t)
    return out
