"""Write the ONNX test models that Tremula did not write: small PyTorch modules exported
with ``torch.onnx.export`` (the TorchScript exporter), with fixed seeds.

Run from the repository root (needs ``pip install torch``; the tests need only the files):
``python tests/popart/data/make_models.py``. The tests compare Tremula's outputs with
onnxruntime's on these files.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent


class CNN(nn.Module):
    """conv-bn-relu-maxpool, conv-relu-avgpool, flatten, linear, softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1),
            nn.BatchNorm2d(4),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(4, 8, 3, stride=1),
            nn.ReLU(),
            nn.AvgPool2d(2),
        )
        self.head = nn.Linear(8 * 1 * 1, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)
        return torch.softmax(self.head(h.reshape(h.shape[0], -1)), dim=1)


class Recurrent(nn.Module):
    """An LSTM then a GRU over a short sequence; the GRU's last state through a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 6)
        self.gru = nn.GRU(6, 5, bidirectional=True)
        self.out = nn.Linear(10, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        _, h = self.gru(y)
        return self.out(torch.cat([h[0], h[1]], dim=1))


def _randomise_bn(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)


def export(model: nn.Module, example: torch.Tensor, name: str, opset: int) -> None:
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (example,),
            str(HERE / name),
            input_names=["x"],
            output_names=["y"],
            opset_version=opset,
            dynamo=False,
            training=torch.onnx.TrainingMode.PRESERVE,
        )
    print(f"wrote {name}")


def main() -> None:
    torch.manual_seed(0)
    mlp = nn.Sequential(
        nn.Linear(16, 32),
        nn.ReLU(),
        nn.Linear(32, 32),
        nn.Tanh(),
        nn.Linear(32, 10),
        nn.LogSoftmax(dim=1),
    )
    export(mlp, torch.zeros(8, 16), "mlp.onnx", 13)
    cnn = CNN()
    _randomise_bn(cnn)
    export(cnn, torch.zeros(2, 1, 8, 8), "cnn.onnx", 11)
    export(Recurrent(), torch.zeros(5, 2, 4), "recurrent.onnx", 14)


if __name__ == "__main__":
    main()
