"""2x2 max-pool with stride 2 on [batch, channels, height, width] (robust-kbench `mnist_pool`, with its signature
and settings)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(x: torch.Tensor) -> torch.Tensor:
    # Floor mode: an odd last row or column is dropped.
    return F.max_pool2d(x, kernel_size=2, stride=2)


class AutogradFunction(torch.autograd.Function):
    """robust-kbench's backward convention: the evaluator sets `backward_fn` to the kernel's `backward`, which gets
    exactly the arguments upstream's task passes it
    (the tuple ctx.saved_tensors, then grad_output), so upstream's kernels run here unmodified."""

    backward_fn = None

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return forward_fn(x)

    @staticmethod
    def backward(ctx, grad_output):
        # upstream hands over the saved tensors as one tuple, (x,), and the kernel returns grad_x
        return AutogradFunction.backward_fn(ctx.saved_tensors, grad_output)


class Model(nn.Module):
    # robust-kbench's settings pass kernel_size = 2; the operator is the 2x2 pool whatever it says.
    def __init__(self, kernel_size: int = 2):
        super().__init__()

    def forward(self, x: torch.Tensor, fn=forward_fn) -> torch.Tensor:
        return fn(x)


def get_inputs(batch_size: int = 64, in_channels: int = 64, height: int = 28, width: int = 28):
    return [torch.randn(batch_size, in_channels, height, width)]
