"""UNet double convolution, inference form: (conv3x3 pad 1 -> BatchNorm -> ReLU) x 2.

(robust-kbench's `unet_conv2d`, the built-in task of that name, is a single conv2d with bias, stride and padding.)
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(x: torch.Tensor,
               conv1_weight: torch.Tensor, bn1_weight: torch.Tensor, bn1_bias: torch.Tensor,
               bn1_mean: torch.Tensor, bn1_var: torch.Tensor,
               conv2_weight: torch.Tensor, bn2_weight: torch.Tensor, bn2_bias: torch.Tensor,
               bn2_mean: torch.Tensor, bn2_var: torch.Tensor, eps: float) -> torch.Tensor:
    out = F.conv2d(x, conv1_weight, padding=1)
    out = F.relu(F.batch_norm(out, bn1_mean, bn1_var, bn1_weight, bn1_bias, training=False, eps=eps))
    out = F.conv2d(out, conv2_weight, padding=1)
    return F.relu(F.batch_norm(out, bn2_mean, bn2_var, bn2_weight, bn2_bias, training=False, eps=eps))


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, eps: float = 1e-5):
        super().__init__()
        # The convs have no bias (BatchNorm follows). Kaiming-normal weights keep activations O(1).
        self.conv1_weight = nn.Parameter(torch.randn(out_channels, in_channels, 3, 3) * math.sqrt(2.0 / (9 * in_channels)))
        self.conv2_weight = nn.Parameter(torch.randn(out_channels, out_channels, 3, 3) * math.sqrt(2.0 / (9 * out_channels)))
        # Non-trivial BatchNorm state: a kernel that skips a scale, shift, mean or variance fails.
        for i in (1, 2):
            setattr(self, f"bn{i}_weight", nn.Parameter(0.5 + torch.rand(out_channels)))
            setattr(self, f"bn{i}_bias", nn.Parameter(0.2 * torch.randn(out_channels)))
            self.register_buffer(f"bn{i}_mean", 0.2 * torch.randn(out_channels))
            self.register_buffer(f"bn{i}_var", 0.5 + torch.rand(out_channels))
        self.eps = eps

    def forward(self, x: torch.Tensor, fn=forward_fn) -> torch.Tensor:
        return fn(x, self.conv1_weight, self.bn1_weight, self.bn1_bias, self.bn1_mean, self.bn1_var,
                  self.conv2_weight, self.bn2_weight, self.bn2_bias, self.bn2_mean, self.bn2_var, self.eps)


def get_inputs(batch: int, in_channels: int, height: int, width: int):
    return [torch.randn(batch, in_channels, height, width)]
