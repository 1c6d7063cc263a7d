"""2x2 max-pool with stride 2 on [batch, channels, height, width] (robust-kbench `mnist_pool`, with its signature
and settings)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(x: torch.Tensor) -> torch.Tensor:
    # Floor mode: an odd last row or column is dropped.
    return F.max_pool2d(x, kernel_size=2, stride=2)


class Model(nn.Module):
    # robust-kbench's settings pass kernel_size = 2; the operator is the 2x2 pool whatever it says.
    def __init__(self, kernel_size: int = 2):
        super().__init__()

    def forward(self, x: torch.Tensor, fn=forward_fn) -> torch.Tensor:
        return fn(x)


def get_inputs(batch_size: int = 64, in_channels: int = 64, height: int = 28, width: int = 28):
    return [torch.randn(batch_size, in_channels, height, width)]
