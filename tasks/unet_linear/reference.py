"""UNet linear layer on a token sequence: x @ W^T + b for x [B, H*W, I] (robust-kbench `unet_linear`, with its
signature and settings: the tokens are an H x W feature map flattened, 16 x 16 unless a config says otherwise)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(x: torch.Tensor, weights: torch.Tensor, biases: torch.Tensor) -> torch.Tensor:
    return F.linear(x, weights, biases)


class AutogradFunction(torch.autograd.Function):
    """robust-kbench's backward convention: the evaluator sets `backward_fn` to the kernel's `backward`, which gets
    exactly the arguments upstream's task passes it
    (grad_output, x, weights; the bias gradient is the sum of grad_output over the leading dimensions), so upstream's kernels run here unmodified."""

    backward_fn = None

    @staticmethod
    def forward(ctx, x, weights, biases):
        ctx.save_for_backward(x, weights)
        return forward_fn(x, weights, biases)

    @staticmethod
    def backward(ctx, grad_output):
        x, weights = ctx.saved_tensors
        grad_x, grad_weights, grad_biases = AutogradFunction.backward_fn(grad_output, x, weights)
        return grad_x, grad_weights, grad_biases


class Model(nn.Module):
    def __init__(self, num_input_features: int = 4096, num_output_features: int = 4096, init_method: str = "normal"):
        super().__init__()
        linear = nn.Linear(num_input_features, num_output_features)
        # robust-kbench's three weight settings; its bias is N(0, 0.1) in all of them
        if init_method == "kaiming":
            nn.init.kaiming_uniform_(linear.weight, a=math.sqrt(5))
        elif init_method == "xavier":
            nn.init.xavier_normal_(linear.weight)
        elif init_method == "normal":
            nn.init.normal_(linear.weight)
        else:
            raise ValueError(f"init_method {init_method!r}: expected 'kaiming', 'xavier' or 'normal'")
        nn.init.normal_(linear.bias, mean=0.0, std=0.1)
        self.weights = nn.Parameter(linear.weight.data.clone())
        self.biases = nn.Parameter(linear.bias.data.clone())

    def forward(self, x: torch.Tensor, fn=forward_fn) -> torch.Tensor:
        return fn(x, self.weights, self.biases)


def get_inputs(batch_size: int = 16, num_input_features: int = 4096, height: int = 16, width: int = 16):
    return [torch.randn(batch_size, height * width, num_input_features)]
