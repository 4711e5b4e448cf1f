"""PyTorch eager (Debian's python3-torch 1.13) side of `make bench`'s GPT:
examples/gpt's small model (4 pre-LN blocks of torch's MultiheadAttention,
128 wide, block 64, a head tied to the embedding), AdamW with decay groups
(lr 1e-3, betas 0.9/0.99, weight decay 0.1 on matrices), clip_grad_norm_
at 1, from the weights and batches examples/bench/step --init-out wrote;
one process with --threads intra-op threads, or --replicas processes of
DDP over gloo (one thread each)."""


import torch
import torch.nn as nn
import torch.nn.functional as F

import common
import torch_launch

args = common.parse("torch")
V, BLOCK, LAYERS, HEADS, WIDTH = 65, 64, 4, 4, 128


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(WIDTH)
        self.attn = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        self.ln_2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH), nn.Dropout(0.0))

    def forward(self, x, mask):
        h = self.ln_1(x)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(V, WIDTH)
        self.pos_emb = nn.Embedding(BLOCK, WIDTH)
        self.drop = nn.Dropout(0.0)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, V, bias=False)
        self.head.weight = self.tok_emb.weight

    def forward(self, ids):
        t = ids.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool, device=ids.device).triu(1)
        x = self.drop(self.tok_emb(ids) + self.pos_emb(torch.arange(t, device=ids.device)))
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln_f(x))


def loss_of(logits, y):
    return F.cross_entropy(logits.reshape(-1, V), y)


def optimizer(net):
    decay = [p for p in net.parameters() if p.dim() >= 2]
    keep = [p for p in net.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": keep, "weight_decay": 0.0}],
                             lr=1e-3, betas=(0.9, 0.99))


def run(rank, world, port, queue):
    torch.set_num_threads(args.threads or (1 if world > 1 else 2))
    state = common.load_safetensors(args.init)
    net = GPT()
    net.load_state_dict({k: torch.from_numpy(v) for k, v in state.items() if not k.startswith("batch.")})
    net.to(args.device)
    x = torch.from_numpy(state[f"batch.{rank}.x"]).long().to(args.device)
    y = torch.from_numpy(state[f"batch.{rank}.y"]).long().to(args.device)
    with torch.no_grad():
        initial = loss_of(net(x), y).item()
    model = torch_launch.wrap(net, rank, world, port)
    opt = optimizer(net)

    def step():
        opt.zero_grad()
        loss_of(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()

    torch_launch.timed(step, args, rank, world, initial, queue)


if __name__ == "__main__":
    torch_launch.main(run, args)
