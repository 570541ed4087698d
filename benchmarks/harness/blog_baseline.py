"""A faithful copy of the blog script's data path, model and loops: the benchmark's baseline.

torchvision-style PIL images per sample (`PILDigits`, served as `torchvision.datasets.MNIST.__getitem__` does),
`ToTensor`, `DataLoader(batch_size=100, shuffle=True)`, hand-made zero states, `out[:, -1, :]`, `loss.item()` every
step; evaluation through a DataLoader of batch 100. Two changes, neither changing what is computed or its speed:
`model.train()` each epoch (the blog's own fix), and the device passed in instead of read from a global.
`train_steps` may stop after `max_steps` so a benchmark can time a fixed amount of work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torchvision.transforms as transforms
from PIL import Image
from torch import nn

try:  # torchvision's wrapper around Image.fromarray's deprecated `mode` argument
    from torchvision.utils import _Image_fromarray
except ImportError:  # pragma: no cover - older or newer torchvision
    def _Image_fromarray(obj: np.ndarray, mode: str) -> Image.Image:  # noqa: N802 - mirrors torchvision's name
        return Image.fromarray(obj)


class BRNN(nn.Module):
    """The blog's model: hand-made zero states, classifies from out[:, -1, :]."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int, num_classes: int,
                 device: torch.device | str = "cpu"):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.device = torch.device(device)  # the script reads a global `device`
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(hidden_size * 2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Set initial states (made on the CPU, then copied, as in the script)
        h0 = torch.zeros(self.num_layers * 2, x.size(0), self.hidden_size).to(self.device)
        c0 = torch.zeros(self.num_layers * 2, x.size(0), self.hidden_size).to(self.device)
        out, _ = self.lstm(x, (h0, c0))  # (B, T, 2H)
        out = self.fc(out[:, -1, :])  # decode the hidden state of the last time step
        return out


class PILDigits(torch.utils.data.Dataset):
    """uint8 images (N, 28, 28) + labels served like torchvision's MNIST: a PIL image per item."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform: Callable | None = None):
        self.data = images.cpu()
        self.targets = labels.cpu()
        self.transform = transform

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        img, target = self.data[index], int(self.targets[index])
        img = _Image_fromarray(img.numpy(), mode="L")  # as torchvision.datasets.MNIST does
        if self.transform is not None:
            img = self.transform(img)
        return img, target

    def __len__(self) -> int:
        return len(self.data)


def make_loader(images: torch.Tensor, labels: torch.Tensor, *, batch_size: int = 100, shuffle: bool = True,
                generator: torch.Generator | None = None) -> torch.utils.data.DataLoader:
    """The script's `DataLoader(dataset=..., batch_size=batch_size, shuffle=...)` over ToTensor'd PIL images."""
    dataset = PILDigits(images, labels, transform=transforms.ToTensor())
    return torch.utils.data.DataLoader(dataset=dataset, batch_size=batch_size, shuffle=shuffle, generator=generator)


def make_model(device: torch.device | str, *, hidden_size: int = 128, num_layers: int = 2,
               num_classes: int = 10) -> tuple[BRNN, nn.Module]:
    """The script's model (input 28, hidden 128, 2 layers, 10 classes) and its criterion."""
    model = BRNN(28, hidden_size, num_layers, num_classes, device).to(device)
    return model, nn.CrossEntropyLoss()


def make_optimizer(model: nn.Module, learning_rate: float = 0.01) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=learning_rate)


def train_steps(model: nn.Module, train_loader, criterion: nn.Module, optimizer: torch.optim.Optimizer,
                device: torch.device, *, epoch: int = 0, num_epochs: int = 1, max_steps: int | None = None,
                log: Callable[[str], None] = print) -> tuple[float, int, int]:
    """One epoch of the script's training loop (or its first `max_steps` steps).

    Returns (train_loss / total_step as the script computes it, steps done, samples seen).
    """
    total_step = len(train_loader)
    model.train()  # the blog's fix: the previous epoch's evaluation left the model in eval mode
    train_loss = 0.0
    steps = samples = 0
    for i, (images, labels) in enumerate(train_loader):
        images = images.view(-1, 28, 28).to(device)
        labels = labels.to(device)

        # Forward pass
        outputs = model(images)
        loss = criterion(outputs, labels)

        # Backward and optimize
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        train_loss += loss.item()

        if (i + 1) % 100 == 0:
            log('Epoch [{}/{}], Step [{}/{}], Loss: {:.4f}'  # noqa: UP032 - the script's own line
                .format(epoch + 1, num_epochs, i + 1, total_step, loss.item()))
        steps += 1
        samples += labels.size(0)
        if max_steps is not None and steps >= max_steps:
            break
    return train_loss / total_step, steps, samples


def evaluate(model: nn.Module, test_loader, criterion: nn.Module, device: torch.device) -> tuple[float, float]:
    """The script's test loop: returns (mean batch loss, accuracy in [0, 1])."""
    model.eval()  # eval mode (the script never switches back; train_steps does)
    with torch.no_grad():
        test_loss = 0.0
        correct = 0
        total = 0
        for images, labels in test_loader:
            images = images.view(-1, 28, 28).to(device)
            labels = labels.to(device)
            outputs = model(images)
            loss = criterion(outputs, labels)
            test_loss += loss.item()

            _, predicted = torch.max(outputs.data, 1)
            total += labels.size(0)
            correct += (predicted == labels).sum().item()
    return test_loss / len(test_loader), correct / total
