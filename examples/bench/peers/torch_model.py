"""The benchmark models as torch modules (torch 1.13 and 2.9 alike), with
the initial state loaded from examples/bench/step --init-out."""

import torch
import torch.nn as nn
import torch.nn.functional as F

import common


class BasicBlock(nn.Module):
    """torchvision's ResNet basic block (torchvision is not in Debian's
    python3-torch nor in the torch-xla venv; the names match its state dict)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet18CIFAR(nn.Module):
    """ResNet-18 with the CIFAR-10 stem: 3x3 stride-1 conv1, no max-pool."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for i in range(4):
            cout, stride = 64 << i, 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build(model, state):
    if model == "toy":
        net = nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 5))
    elif model == "resnet18-cifar":
        net = ResNet18CIFAR()
    else:
        net = nn.Sequential(
            nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25),
            nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))
    net.load_state_dict({k: torch.from_numpy(state[k]) for k in common.state_names(model, state)})
    return net


def loss_of(model, out, y):
    if model == "toy":
        return F.mse_loss(out, y)
    if model == "resnet18-cifar":
        return F.cross_entropy(out, y.long())
    return F.nll_loss(F.log_softmax(out, dim=1), y.long())


def optimizer(model, net):
    if model == "toy":
        return torch.optim.SGD(net.parameters(), lr=0.001)
    if model == "resnet18-cifar":
        return torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    return torch.optim.Adadelta(net.parameters(), lr=1.0)


def batch(state, rank, device="cpu"):
    return torch.from_numpy(state[f"batch.{rank}.x"]).to(device), torch.from_numpy(state[f"batch.{rank}.y"]).to(device)
