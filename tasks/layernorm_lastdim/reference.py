"""LayerNorm over the last dimension with an affine weight and bias: the transformer form.

(robust-kbench's `layernorm`, the built-in task of that name, normalises over (C, H, W) instead.)
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        # Non-trivial affine parameters: a kernel that ignores weight or bias must fail.
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))
        self.bias = nn.Parameter(0.5 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor, fn=forward_fn) -> torch.Tensor:
        return fn(x, self.weight, self.bias, self.eps)


def get_inputs(batch: int, hidden: int):
    return [torch.randn(batch, hidden)]
