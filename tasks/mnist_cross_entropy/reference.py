"""Mean cross-entropy of logits [batch, classes] against int64 class targets (robust-kbench `mnist_cross_entropy`,
with its signature and settings)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(predictions, targets, reduction="mean")


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor, fn=forward_fn) -> torch.Tensor:
        return fn(predictions, targets)


def get_inputs(batch_size: int = 4096, num_classes: int = 10):
    predictions = torch.randn(batch_size, num_classes)
    # Integer targets: init schemes leave them alone; backward returns no gradient for them.
    targets = torch.randint(0, num_classes, (batch_size,), dtype=torch.int64)
    return [predictions, targets]
