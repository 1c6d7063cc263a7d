"""2D convolution with bias, stride and padding: robust-kbench's `unet_conv2d`, with its signature and settings.

y = conv2d(x, weights, biases, stride, padding) for x [B, Ci, H, W] and weights [Co, Ci, K, K]; the padding defaults
to K // 2. kbench's one change to robust-kbench's Model: the bias is drawn N(0, 0.1) (robust-kbench zeroes it, so a
kernel that drops the bias would pass there). (The UNet double conv + BatchNorm block is `unet_double_conv`.)
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(
    x: torch.Tensor,
    weights: torch.Tensor,
    biases: torch.Tensor,
    stride: int = 1,
    padding: int = 0,
) -> torch.Tensor:
    return F.conv2d(x, weights, biases, stride=stride, padding=padding)


class Model(nn.Module):
    def __init__(
        self,
        in_channels: int = 64,
        out_channels: int = 64,
        kernel_size: int = 3,
        stride: int = 1,
        padding: int = None,
        init_method: str = "xavier",
    ):
        super().__init__()
        self.stride = stride
        self.padding = kernel_size // 2 if padding is None else padding
        weight = torch.empty(out_channels, in_channels, kernel_size, kernel_size)
        # robust-kbench's three weight settings
        if init_method == "kaiming":
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
        elif init_method == "xavier":
            nn.init.xavier_normal_(weight)
        elif init_method == "normal":
            nn.init.normal_(weight)
        else:
            raise ValueError(f"init_method {init_method!r}: expected 'kaiming', 'xavier' or 'normal'")
        self.weights = nn.Parameter(weight)
        self.biases = nn.Parameter(0.1 * torch.randn(out_channels))

    def forward(self, x: torch.Tensor, fn=forward_fn) -> torch.Tensor:
        return fn(x, self.weights, self.biases, self.stride, self.padding)


def get_inputs(batch_size: int = 16, in_channels: int = 64, height: int = 32, width: int = 32):
    return [torch.randn(batch_size, in_channels, height, width)]
