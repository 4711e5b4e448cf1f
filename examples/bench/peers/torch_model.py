"""The benchmark models as torch modules (torch 1.13 and 2.9 alike), with
the initial state loaded from examples/bench/step --init-out."""

import torch
import torch.nn as nn
import torch.nn.functional as F

import common


def build(model, state):
    if model == "toy":
        net = nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 5))
    else:
        net = nn.Sequential(
            nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25),
            nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))
    names = common.CNN_PARAMS if model == "cnn" else common.TOY_PARAMS
    net.load_state_dict({k: torch.from_numpy(state[k]) for k in names})
    return net


def loss_of(model, out, y):
    if model == "toy":
        return F.mse_loss(out, y)
    return F.nll_loss(F.log_softmax(out, dim=1), y.long())


def optimizer(model, net):
    if model == "toy":
        return torch.optim.SGD(net.parameters(), lr=0.001)
    return torch.optim.Adadelta(net.parameters(), lr=1.0)


def batch(state, rank, device="cpu"):
    return torch.from_numpy(state[f"batch.{rank}.x"]).to(device), torch.from_numpy(state[f"batch.{rank}.y"]).to(device)
