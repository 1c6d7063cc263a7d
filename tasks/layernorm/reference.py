"""LayerNorm over the trailing (num_features, dim1, dim2) dimensions of x [B, C, H, W] with an elementwise affine
weight and bias of shape (C, H, W): robust-kbench's `layernorm`, with its signature and settings.

Each of the B rows of C*H*W elements is normalised with its own mean and biased variance; weight and bias are full
tensors, not per-channel vectors. (The transformer form over the last dimension is `layernorm_lastdim`.)
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    # the normalised shape is the weight's: the last weight.dim() dimensions of x
    normalized_shape = tuple(x.shape[-weight.dim():])
    return F.layer_norm(x, normalized_shape, weight, bias, eps)


class AutogradFunction(torch.autograd.Function):
    """robust-kbench's backward convention: the evaluator sets `backward_fn` to the kernel's `backward`, which gets
    exactly the arguments upstream's task passes it (grad_output, x, weight, bias, eps, then normalized_shape: the
    trailing weight.dim() sizes of x, as a tuple of ints) and returns (grad_x, grad_weight, grad_bias), so upstream's
    kernels run here unmodified."""

    backward_fn = None

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        ctx.save_for_backward(x, weight, bias)
        ctx.eps = eps
        ctx.normalized_shape = tuple(x.shape[-weight.dim():])
        return forward_fn(x, weight, bias, eps)

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, bias = ctx.saved_tensors
        grad_x, grad_weight, grad_bias = AutogradFunction.backward_fn(grad_output, x, weight, bias, ctx.eps,
                                                                      ctx.normalized_shape)
        return grad_x, grad_weight, grad_bias, None   # eps gets no gradient


class Model(nn.Module):
    def __init__(self, num_features: int, dim1: int, dim2: int, eps: float = 1e-5, init_method: str = "standard"):
        super().__init__()
        shape = (num_features, dim1, dim2)
        # robust-kbench's two settings: "standard" (weight 1, bias 0, as nn.LayerNorm starts) and "random" (both
        # N(0, 1)); kbench's own configs use "random", so a kernel that ignores weight or bias fails.
        if init_method == "standard":
            weight, bias = torch.ones(shape), torch.zeros(shape)
        elif init_method == "random":
            weight, bias = torch.randn(shape), torch.randn(shape)
        else:
            raise ValueError(f"init_method {init_method!r}: expected 'standard' or 'random'")
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias)
        self.eps = eps

    def forward(self, x: torch.Tensor, fn=forward_fn) -> torch.Tensor:
        return fn(x, self.weight, self.bias, self.eps)


def get_inputs(batch_size: int = 16, num_features: int = 64, dim1: int = 256, dim2: int = 256):
    return [torch.randn(batch_size, num_features, dim1, dim2)]
