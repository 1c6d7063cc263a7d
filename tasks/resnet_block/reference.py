"""ResNet basic block in inference form: robust-kbench's `resnet_block`, with its signature and settings.

conv3x3(stride) + bias -> BN -> ReLU -> conv3x3 + bias -> BN, plus a shortcut, then add and ReLU. The shortcut is
the identity, or conv1x1(stride) + bias -> BN when a downsample is asked for, the stride is not 1 or the channel
count changes. BatchNorm uses its running statistics. The conv biases are None (as in robust-kbench's Model) and so
are the six downsample arguments without a downsample: a kernel takes them as optional tensors.

kbench's one change to robust-kbench's Model: the BatchNorm state is drawn at random (robust-kbench leaves weight 1,
bias 0, mean 0, variance 1, so a kernel that skips BatchNorm altogether would pass there).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(
    x: torch.Tensor,
    conv1_weight: torch.Tensor,
    conv1_bias: torch.Tensor,
    bn1_weight: torch.Tensor,
    bn1_bias: torch.Tensor,
    bn1_mean: torch.Tensor,
    bn1_var: torch.Tensor,
    conv2_weight: torch.Tensor,
    conv2_bias: torch.Tensor,
    bn2_weight: torch.Tensor,
    bn2_bias: torch.Tensor,
    bn2_mean: torch.Tensor,
    bn2_var: torch.Tensor,
    downsample_weight: torch.Tensor = None,
    downsample_bias: torch.Tensor = None,
    downsample_bn_weight: torch.Tensor = None,
    downsample_bn_bias: torch.Tensor = None,
    downsample_bn_mean: torch.Tensor = None,
    downsample_bn_var: torch.Tensor = None,
    stride: int = 1,
    eps: float = 1e-5,
) -> torch.Tensor:
    out = F.conv2d(x, conv1_weight, conv1_bias, stride=stride, padding=1)
    out = F.relu(F.batch_norm(out, bn1_mean, bn1_var, bn1_weight, bn1_bias, False, 0.1, eps))
    out = F.conv2d(out, conv2_weight, conv2_bias, stride=1, padding=1)
    out = F.batch_norm(out, bn2_mean, bn2_var, bn2_weight, bn2_bias, False, 0.1, eps)
    if downsample_weight is None:
        shortcut = x
    else:
        shortcut = F.conv2d(x, downsample_weight, downsample_bias, stride=stride, padding=0)
        shortcut = F.batch_norm(shortcut, downsample_bn_mean, downsample_bn_var, downsample_bn_weight,
                                downsample_bn_bias, False, 0.1, eps)
    return F.relu(out + shortcut)


def _bn_state(module: nn.Module, prefix: str, channels: int) -> None:
    """Affine parameters and running statistics far enough from (1, 0, 0, 1) that skipping BatchNorm fails."""
    setattr(module, f"{prefix}_weight", nn.Parameter(0.5 + torch.rand(channels)))
    setattr(module, f"{prefix}_bias", nn.Parameter(0.2 * torch.randn(channels)))
    module.register_buffer(f"{prefix}_mean", 0.2 * torch.randn(channels))
    module.register_buffer(f"{prefix}_var", 0.5 + torch.rand(channels))


class Model(nn.Module):
    def __init__(self, in_channels: int = 64, out_channels: int = 64, stride: int = 1, downsample: bool = False):
        super().__init__()
        self.stride = stride
        self.eps = 1e-5
        # the convs initialised as nn.Conv2d initialises them (as robust-kbench's Model does), without bias
        self.conv1_weight = nn.Parameter(nn.Conv2d(in_channels, out_channels, 3, bias=False).weight.data.clone())
        self.conv1_bias = None
        _bn_state(self, "bn1", out_channels)
        self.conv2_weight = nn.Parameter(nn.Conv2d(out_channels, out_channels, 3, bias=False).weight.data.clone())
        self.conv2_bias = None
        _bn_state(self, "bn2", out_channels)
        self.has_downsample = downsample or stride != 1 or in_channels != out_channels
        if self.has_downsample:
            self.downsample_weight = nn.Parameter(
                nn.Conv2d(in_channels, out_channels, 1, bias=False).weight.data.clone())
            self.downsample_bias = None
            _bn_state(self, "downsample_bn", out_channels)
        else:
            self.downsample_weight = self.downsample_bias = None
            self.downsample_bn_weight = self.downsample_bn_bias = None
            self.downsample_bn_mean = self.downsample_bn_var = None

    def forward(self, x: torch.Tensor, fn=forward_fn) -> torch.Tensor:
        return fn(x, self.conv1_weight, self.conv1_bias, self.bn1_weight, self.bn1_bias, self.bn1_mean,
                  self.bn1_var, self.conv2_weight, self.conv2_bias, self.bn2_weight, self.bn2_bias, self.bn2_mean,
                  self.bn2_var, self.downsample_weight, self.downsample_bias, self.downsample_bn_weight,
                  self.downsample_bn_bias, self.downsample_bn_mean, self.downsample_bn_var, self.stride, self.eps)


def get_inputs(batch_size: int = 10, in_channels: int = 3, height: int = 224, width: int = 224):
    # robust-kbench's inputs are 224 x 224; kbench's own configs pass smaller, odd sizes
    return [torch.randn(batch_size, in_channels, height, width)]
