"""PyTorch eager (Debian's python3-torch 1.13) side of `make bench`: one
process with --threads intra-op threads, or --replicas processes of DDP
over gloo (one thread each), each on its own batch."""


import torch

import common
import torch_launch
import torch_model

args = common.parse("torch")


def run(rank, world, port, queue):
    torch.set_num_threads(args.threads or (1 if world > 1 else 2))
    state = common.load_safetensors(args.init)
    torch.manual_seed(0)
    net = torch_model.build(args.model, state).to(args.device)
    x, y = torch_model.batch(state, rank, args.device)
    net.eval()
    with torch.no_grad():
        initial = torch_model.loss_of(args.model, net(x), y).item()
    net.train()
    model = torch_launch.wrap(net, rank, world, port)
    opt = torch_model.optimizer(args.model, net)

    def step():
        opt.zero_grad()
        torch_model.loss_of(args.model, model(x), y).backward()
        opt.step()

    torch_launch.timed(step, args, rank, world, initial, queue)


if __name__ == "__main__":
    torch_launch.main(run, args)
