# Records torch 1.13's optimizer and scheduler trajectories in float64:
#   /usr/bin/python3 gen_torch_trajectories.py
# Problem: loss = sum(w * (p - c)**2), p starting at p0; 6 steps each.
import json
import torch

p0 = [0.5, -1.0, 2.0, 0.25, -0.75]
w = [1.0, 0.5, 2.0, 1.5, 0.25]
c = [0.0, 1.0, -1.0, 0.5, 2.0]

def run(make):
    p = torch.tensor(p0, dtype=torch.float64, requires_grad=True)
    opt = make([p])
    traj = []
    for _ in range(6):
        opt.zero_grad()
        loss = (torch.tensor(w, dtype=torch.float64) * (p - torch.tensor(c, dtype=torch.float64)) ** 2).sum()
        loss.backward()
        opt.step()
        traj.append(p.detach().tolist())
    return traj

optimizers = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "sgd_dampening_wd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.1),
    "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.1),
    "adam_wd": lambda ps: torch.optim.Adam(ps, lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.05, weight_decay=0.1),
    "adadelta": lambda ps: torch.optim.Adadelta(ps, lr=1.0),
    "adadelta_wd": lambda ps: torch.optim.Adadelta(ps, lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.05),
}

def lrs(make, epochs=8):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.1)
    sched = make(opt)
    out = []
    for _ in range(epochs):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out

schedulers = {
    "step": lrs(lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
    "cosine": lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=0.01)),
    "warmup": lrs(lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25, total_iters=4)),
}
json.dump({"p0": p0, "w": w, "c": c,
           "optimizers": {k: run(v) for k, v in optimizers.items()},
           "schedulers": schedulers}, open("torch_trajectories.json", "w"), indent=1)
