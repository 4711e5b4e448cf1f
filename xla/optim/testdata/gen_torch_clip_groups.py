# Records torch 2.9's clip_grad_norm_ and AdamW with parameter groups, in
# float64:
#   python3 gen_torch_clip_groups.py     (PyPI torch==2.9.0)
# clip: three gradients, each norm type and max norm; the returned total
# norm and the clipped gradients, NaN and inf gradients included.
# adamw_groups: a matrix (weight decay 0.1) and a vector (no decay) on
# loss = sum(w * (p - c)**2), 6 steps.
import json, math
import torch

grads = [[0.5, -1.5, 2.0, 0.25], [[3.0, -0.5], [1.0, -2.5]], [-0.75]]


def clip(max_norm, norm_type, poison=None):
    ps = []
    for g in grads:
        p = torch.zeros(torch.tensor(g).shape, dtype=torch.float64, requires_grad=True)
        p.grad = torch.tensor(g, dtype=torch.float64)
        ps.append(p)
    if poison is not None:
        ps[1].grad[0, 1] = poison
    total = torch.nn.utils.clip_grad_norm_(ps, max_norm, norm_type=norm_type)
    enc = lambda v: str(v) if math.isnan(v) or math.isinf(v) else v
    return {"max_norm": max_norm, "norm_type": "inf" if math.isinf(norm_type) else norm_type,
            "poison": None if poison is None else str(poison), "total": enc(total.item()),
            "grads": [[enc(v) for v in p.grad.flatten().tolist()] for p in ps]}


cases = [clip(1.0, 2.0), clip(100.0, 2.0), clip(0.5, float("inf")), clip(2.0, 1.5), clip(0.0, 2.0),
         clip(1.0, 2.0, float("nan")), clip(1.0, 2.0, float("inf")), clip(1.0, float("inf"), float("inf"))]

w_mat, c_mat = [[1.0, 0.5], [2.0, 1.5]], [[0.0, 1.0], [-1.0, 0.5]]
w_vec, c_vec = [0.25, 1.0, 0.75], [2.0, -0.5, 0.25]
mat = torch.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=torch.float64, requires_grad=True)
vec = torch.tensor([-0.75, 1.5, 0.0], dtype=torch.float64, requires_grad=True)
opt = torch.optim.AdamW([{"params": [mat], "weight_decay": 0.1}, {"params": [vec], "weight_decay": 0.0}],
                        lr=0.05, betas=(0.9, 0.95))
traj = []
for _ in range(6):
    opt.zero_grad()
    loss = (torch.tensor(w_mat, dtype=torch.float64) * (mat - torch.tensor(c_mat, dtype=torch.float64)) ** 2).sum() \
        + (torch.tensor(w_vec, dtype=torch.float64) * (vec - torch.tensor(c_vec, dtype=torch.float64)) ** 2).sum()
    loss.backward()
    opt.step()
    traj.append([mat.detach().flatten().tolist(), vec.detach().tolist()])
json.dump({"torch": torch.__version__, "grads": grads, "clip": cases,
           "adamw_groups": {"w_mat": w_mat, "c_mat": c_mat, "w_vec": w_vec, "c_vec": c_vec,
                            "mat0": [[0.5, -1.0], [2.0, 0.25]], "vec0": [-0.75, 1.5, 0.0], "trajectory": traj}},
          open("torch_clip_groups.json", "w"), indent=1)
