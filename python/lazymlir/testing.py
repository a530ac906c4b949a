"""Models and a training step shared by the tests, the benchmarks and the demo.

Importable without path edits (``from lazymlir.testing import MnistNet``); like
``torch.testing``, not needed by the device itself."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from .tensor import mark_step


class MnistNet(nn.Module):
    """The Lazy Tensor tutorial's MNIST network: two convolutions, max
    pooling, dropout, two linear layers, log_softmax."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock (stride 1, no downsample)."""

    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)


def train_step(model, optimizer, x, y, device, loss_fn=F.nll_loss):
    """One training step as the tutorial writes it: inputs moved to
    ``device``, zero_grad, forward, loss, backward, optimizer step, and on the
    lazy device mark_step(). Returns the loss (a lazy tensor on "lazy")."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x.to(device)), y.to(device))
    loss.backward()
    optimizer.step()
    if device == "lazy":
        mark_step()
    return loss
