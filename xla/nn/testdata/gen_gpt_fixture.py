# Builds the GPT fixture with torch 2.9 (PyPI torch==2.9.0, CPU):
#   python3 gen_gpt_fixture.py
# A small pre-LN GPT written with torch's own layers (Embedding,
# LayerNorm, MultiheadAttention with a causal bool mask, GELU, a head tied
# to the token embedding). Every tensor of its state dict is filled by a
# formula evaluated in float64 and rounded to float32, which gpt_test.go
# reproduces bit for bit; the fixture holds the logits, the loss and every
# parameter's gradient on a fixed batch, for the exact and tanh GELU.
import json, math
import torch
import torch.nn as nn
import torch.nn.functional as F

V, BLOCK, LAYERS, HEADS, WIDTH = 11, 8, 2, 2, 16
B, T = 3, 8


class Block(nn.Module):
    def __init__(self, tanh):
        super().__init__()
        self.ln_1 = nn.LayerNorm(WIDTH)
        self.attn = nn.MultiheadAttention(WIDTH, HEADS, dropout=0.0, batch_first=True)
        self.ln_2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(approximate="tanh" if tanh else "none"),
                                 nn.Linear(4 * WIDTH, WIDTH), nn.Dropout(0.0))

    def forward(self, x, mask):
        h = self.ln_1(x)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, tanh):
        super().__init__()
        self.tok_emb = nn.Embedding(V, WIDTH)
        self.pos_emb = nn.Embedding(BLOCK, WIDTH)
        self.drop = nn.Dropout(0.0)
        self.blocks = nn.ModuleList([Block(tanh) for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, V, bias=False)
        self.head.weight = self.tok_emb.weight

    def forward(self, ids):
        t = ids.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)  # True: may not attend
        x = self.drop(self.tok_emb(ids) + self.pos_emb(torch.arange(t)))
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln_f(x))


def formula(k, n):
    i = torch.arange(n, dtype=torch.float64)
    return (torch.remainder(i * 7919 + k * 104729, 1000) - 500) / 500


def fill(model):
    state = model.state_dict()
    filled, names = {}, []
    for k, name in enumerate(state):
        if name == "head.weight":
            continue  # tied to tok_emb.weight
        t = state[name]
        base = formula(k, t.numel()).reshape(t.shape)
        if t.dim() >= 2:
            v = base / math.sqrt(t.shape[-1])
        elif name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
            v = 1 + 0.1 * base
        else:
            v = 0.1 * base
        filled[name] = v.to(torch.float32)
        names.append([name, k, list(t.shape)])
    model.load_state_dict(filled, strict=False)
    return names


def short(t):  # float32 values need 9 significant digits
    return [float("%.9g" % v) for v in t.flatten().tolist()]


ids = torch.tensor([[(i * 5 + j * 3) % V for j in range(T)] for i in range(B)])
targets = torch.tensor([[(i * 7 + j * 2 + 1) % V for j in range(T)] for i in range(B)])
out = {"config": {"vocab": V, "block": BLOCK, "layers": LAYERS, "heads": HEADS, "width": WIDTH},
       "ids": ids.flatten().tolist(), "targets": targets.flatten().tolist(), "batch": [B, T],
       "torch": torch.__version__}
for tanh in (False, True):
    torch.manual_seed(0)
    model = GPT(tanh)
    names = fill(model)
    logits = model(ids)
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()
    out["state_dict"] = names
    out["tanh" if tanh else "exact"] = {
        "logits": short(logits.detach()),
        "loss": loss.item(),
        "grads": {n: short(p.grad) for n, p in model.named_parameters()},
    }
json.dump(out, open("gpt_expected.json", "w"), separators=(",", ":"))
