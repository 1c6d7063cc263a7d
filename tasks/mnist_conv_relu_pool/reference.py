"""MNIST conv block: conv2d (valid, stride 1, with bias) -> ReLU -> 2x2 max-pool (robust-kbench
`mnist_conv_relu_pool`, with its signature and settings)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(x: torch.Tensor, weights: torch.Tensor, biases: torch.Tensor) -> torch.Tensor:
    # Floor-mode pooling: an odd last row or column of the conv output is dropped.
    return F.max_pool2d(F.relu(F.conv2d(x, weights, bias=biases)), kernel_size=2)


class AutogradFunction(torch.autograd.Function):
    """robust-kbench's backward convention: the evaluator sets `backward_fn` to the kernel's `backward`, which gets
    exactly the arguments upstream's task passes it
    (x, weights, biases, then grad_output last), so upstream's kernels run here unmodified."""

    backward_fn = None

    @staticmethod
    def forward(ctx, x, weights, biases):
        ctx.save_for_backward(x, weights, biases)
        return forward_fn(x, weights, biases)

    @staticmethod
    def backward(ctx, grad_output):
        x, weights, biases = ctx.saved_tensors
        grad_x, grad_weights, grad_biases = AutogradFunction.backward_fn(x, weights, biases, grad_output)
        return grad_x, grad_weights, grad_biases


class Model(nn.Module):
    def __init__(self, in_channels: int = 1, out_channels: int = 32, kernel_size: int = 3, stride: int = 1,
                 init_method: str = "normal"):
        super().__init__()
        # robust-kbench's Model takes a stride but its forward_fn never uses it: the conv has stride 1.
        conv = nn.Conv2d(in_channels, out_channels, kernel_size=kernel_size, stride=stride, bias=True)
        # robust-kbench's three weight settings; its bias is N(0, 0.1) in all of them
        if init_method == "kaiming":
            nn.init.kaiming_uniform_(conv.weight, a=math.sqrt(5))
        elif init_method == "xavier":
            nn.init.xavier_normal_(conv.weight)
        elif init_method == "normal":
            nn.init.normal_(conv.weight)
        else:
            raise ValueError(f"init_method {init_method!r}: expected 'kaiming', 'xavier' or 'normal'")
        nn.init.normal_(conv.bias, mean=0.0, std=0.1)
        self.weights = nn.Parameter(conv.weight.data.clone())
        self.biases = nn.Parameter(conv.bias.data.clone())

    def forward(self, x: torch.Tensor, fn=forward_fn) -> torch.Tensor:
        return fn(x, self.weights, self.biases)


def get_inputs(batch_size: int = 64, in_channels: int = 1, height: int = 28, width: int = 28):
    return [torch.randn(batch_size, in_channels, height, width)]
