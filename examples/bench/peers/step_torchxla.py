"""torch-xla 2.9 on its PJRT CPU runtime (PJRT_DEVICE=CPU): the same
model, initial weights, batch and optimizer as examples/bench/step; one
mark_step per --steps-per-markstep steps."""

import os
import time

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch
import torch_xla
import torch_xla.core.xla_model as xm

import common
import torch_model

args = common.parse("torch-xla")
state = common.load_safetensors(args.init)
dev = torch_xla.device()
net = torch_model.build(args.model, state).to(dev)
x, y = torch_model.batch(state, 0, dev)
opt = torch_model.optimizer(args.model, net)

net.eval()
with torch.no_grad():
    initial = torch_model.loss_of(args.model, net(x), y).item()
net.train()


def steps(n):
    for i in range(n):
        opt.zero_grad()
        torch_model.loss_of(args.model, net(x), y).backward()
        opt.step()
        if (i + 1) % args.steps_per_markstep == 0:
            torch_xla.sync()
    xm.wait_device_ops()


steps(args.warmup)
times = []
for _ in range(args.samples):
    start = time.perf_counter()
    steps(args.steps)
    times.append((time.perf_counter() - start) * 1000 / args.steps)
common.report("torch-xla " + torch_xla.__version__, args, initial, times)
