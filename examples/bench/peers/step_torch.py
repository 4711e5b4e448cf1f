"""PyTorch eager (Debian's python3-torch 1.13) side of `make bench`: one
process with --threads intra-op threads, or --replicas processes of DDP
over gloo (one thread each), each on its own batch."""

import os
import time

import torch
import torch.distributed as dist

import common
import torch_launch
import torch_model

args = common.parse("torch")


def run(rank, world, port, queue):
    torch.set_num_threads(args.threads or (1 if world > 1 else 2))
    state = common.load_safetensors(args.init)
    torch.manual_seed(0)
    net = torch_model.build(args.model, state)
    x, y = torch_model.batch(state, rank)
    net.eval()
    with torch.no_grad():
        initial = torch_model.loss_of(args.model, net(x), y).item()
    net.train()
    model = net
    if world > 1:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch_model.optimizer(args.model, net)

    def steps(n):
        for _ in range(n):
            opt.zero_grad()
            torch_model.loss_of(args.model, model(x), y).backward()
            opt.step()

    steps(args.warmup)
    times = []
    for _ in range(args.samples):
        if world > 1:
            dist.barrier()
        start = time.perf_counter()
        steps(args.steps)
        times.append((time.perf_counter() - start) * 1000 / args.steps)
    if world > 1:
        dist.destroy_process_group()
    if rank == 0:
        queue.put((initial, times))


if __name__ == "__main__":
    torch_launch.main(run, args)
