"""LLaMA feed-forward block: down(silu(x @ Wg^T) * (x @ Wu^T)), no biases (robust-kbench `llama_ffw`, with its
signature and settings)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(x: torch.Tensor, gate_proj: torch.Tensor, up_proj: torch.Tensor, down_proj: torch.Tensor) -> torch.Tensor:
    return F.linear(F.silu(F.linear(x, gate_proj)) * F.linear(x, up_proj), down_proj)


class Model(nn.Module):
    def __init__(self, num_features: int = 4096, up_features: int = 14336):
        super().__init__()
        # initialised as nn.Linear initialises its weights (as robust-kbench's Model does)
        self.gate_proj = nn.Parameter(nn.Linear(num_features, up_features).weight.data.clone())
        self.up_proj = nn.Parameter(nn.Linear(num_features, up_features).weight.data.clone())
        self.down_proj = nn.Parameter(nn.Linear(up_features, num_features).weight.data.clone())

    def forward(self, x: torch.Tensor, fn=forward_fn) -> torch.Tensor:
        return fn(x, self.gate_proj, self.up_proj, self.down_proj)


def get_inputs(batch_size: int = 16, num_tokens: int = 1024, num_features: int = 4096):
    return [torch.randn(batch_size, num_tokens, num_features)]
