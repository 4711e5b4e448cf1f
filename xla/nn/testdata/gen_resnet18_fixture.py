# Builds the ResNet-18 fixture with torch 1.13 + torchvision 0.14 (Debian
# python3-torch, python3-torchvision) and safetensors 0.8.0 (PyPI):
#   /usr/bin/python3 gen_resnet18_fixture.py
# Every tensor of torchvision's resnet18() state dict is filled by a formula
# evaluated in float64 and rounded to the tensor's dtype, which Go reproduces
# bit for bit (resnet_test.go). The file torch writes is not committed (46
# MB); its exact header, its sha256, the state dict's names and shapes, and
# the logits on a fixed input are.
import hashlib, json, math
import torch, torchvision
from safetensors.torch import save_file

def formula(k, n):
    i = torch.arange(n, dtype=torch.float64)
    return (torch.remainder(i * 7919 + k * 104729, 1000) - 500) / 500

model = torchvision.models.resnet18()
state = model.state_dict()
names = list(state)
filled = {}
for k, name in enumerate(names):
    t = state[name]
    if name.endswith("num_batches_tracked"):
        filled[name] = torch.tensor(k, dtype=torch.int64)
        continue
    base = formula(k, t.numel()).reshape(t.shape)
    if name.endswith("weight") and t.dim() >= 2:
        v = base / math.sqrt(t[0].numel())
    elif name.endswith("weight"):
        v = 1 + 0.1 * base
    elif name.endswith("running_var"):
        v = 1 + 0.5 * base.abs()
    else:  # bias, running_mean
        v = 0.1 * base
    filled[name] = v.to(torch.float32)
model.load_state_dict(filled)
save_file(filled, "/tmp/resnet18_fixture.safetensors")
data = open("/tmp/resnet18_fixture.safetensors", "rb").read()
header_len = int.from_bytes(data[:8], "little")

x = ((torch.arange(2 * 3 * 64 * 64, dtype=torch.float64) * 31) % 255 / 255 - 0.5).to(torch.float32).reshape(2, 3, 64, 64)
with torch.no_grad():
    model.eval()
    logits_eval = model(x)
    model.train()
    logits_train = model(x)

open("resnet18_header.json", "wb").write(data[8:8 + header_len])
json.dump({
    "file_sha256": hashlib.sha256(data).hexdigest(),
    "file_size": len(data),
    "state_dict": [[n, list(state[n].shape), str(state[n].dtype)] for n in names],
    "num_parameters": sum(p.numel() for p in model.parameters()),
    "input_shape": [2, 3, 64, 64],
    "logits_eval": logits_eval.flatten().tolist(),
    "logits_train": logits_train.flatten().tolist(),
}, open("resnet18_expected.json", "w"))
