"""The seed's whole MNIST job in PyTorch (Debian's python3-torch 1.13), the
peer of examples/mnist in `make bench`: real MNIST from the same idx files,
torch's DistributedSampler (shuffled, seed 1), the global batch split over
the ranks, the seed's CNN, Adadelta + StepLR, then every rank's test pass
over the whole test set, as examples/mnist does. Started by ddprun (which
sets torchrun's environment and OMP_NUM_THREADS=1):

    ddprun --nproc_per_node=2 python3 mnist_torch.py --data DIR

Rank 0 prints one JSON line: training seconds (the first step to the end
of the test pass, as examples/mnist counts), samples/s, test accuracy."""

import argparse
import json
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

MEAN, STD = 0.1307, 0.3081


def read_idx(path):
    with open(path, "rb") as f:
        _, dtype, ndim = struct.unpack(">HBB", f.read(4))
        dims = struct.unpack(">" + "I" * ndim, f.read(4 * ndim))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


def dataset(data, prefix):
    images = read_idx(os.path.join(data, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(os.path.join(data, f"{prefix}-labels-idx1-ubyte"))
    x = (torch.from_numpy(images.astype(np.float32) / 255.0) - MEAN) / STD
    return TensorDataset(x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64)))


class Net(nn.Module):
    """The seed's model (pytorch/examples mnist)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = self.dropout2(F.relu(self.fc1(torch.flatten(x, 1))))
        return F.log_softmax(self.fc2(x), dim=1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default=os.path.expanduser("~/.cache/xladdp/data/mnist"))
    p.add_argument("--batch-size", type=int, default=64, help="global batch, split over the ranks")
    p.add_argument("--test-batch-size", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--gamma", type=float, default=0.7)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.batch_size % world:
        raise SystemExit(f"--batch-size {a.batch_size} does not split over {world} ranks")
    torch.manual_seed(a.seed)
    train, test = dataset(a.data, "train"), dataset(a.data, "t10k")
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=a.seed)
    loader = DataLoader(train, batch_size=a.batch_size // world, sampler=sampler)
    model = nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.Adadelta(model.parameters(), lr=a.lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=a.gamma)
    start, samples, accuracy = time.perf_counter(), 0, 0.0
    for epoch in range(a.epochs):
        model.train()
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            opt.step()
            samples += len(x) * world
        sched.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in DataLoader(test, batch_size=a.test_batch_size):
                correct += (model(x).argmax(1) == y).sum().item()
        accuracy = correct / len(test)
    seconds = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({"runner": f"torch {torch.__version__} DDP gloo", "ranks": world, "threads": torch.get_num_threads(),
                          "training_s": seconds, "samples": samples, "samples_per_s": samples / seconds,
                          "test_accuracy": accuracy, "final_loss": loss.item()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
