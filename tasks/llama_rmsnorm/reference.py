"""LLaMA RMSNorm over the hidden dimension of a [batch, tokens, features] activation (robust-kbench
`llama_rmsnorm`, with its signature and settings)."""

import torch
import torch.nn as nn


def forward_fn(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    x_fp32 = x.float()  # computed in fp32 whatever the input's precision, as robust-kbench does
    x_normed = (x_fp32 * torch.rsqrt(x_fp32.pow(2).mean(-1, keepdim=True) + eps)).type_as(x)
    return x_normed * w


class Model(nn.Module):
    def __init__(self, num_features: int, eps: float):
        super().__init__()
        # robust-kbench draws the weight N(1, 0.1), so a kernel that ignores it fails
        self.w = nn.Parameter(torch.empty(num_features).normal_(mean=1.0, std=0.1))
        self.eps = eps

    def forward(self, x: torch.Tensor, fn=forward_fn) -> torch.Tensor:
        return fn(x, self.w, self.eps)


def get_inputs(batch_size: int = 16, num_tokens: int = 1024, num_features: int = 4096):
    return [torch.randn(batch_size, num_tokens, num_features)]
