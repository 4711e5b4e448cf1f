# Writes torch_mixed.safetensors with torch 1.13 (Debian python3-torch) and
# safetensors 0.8.0 (PyPI). Run: /usr/bin/python3 gen_torch_fixture.py
# The Go test checks every value below.
import torch
from safetensors.torch import save_file

tensors = {
    "weight": torch.arange(12, dtype=torch.float32).reshape(3, 4) / 4 - 1,
    "half": torch.tensor([0.5, -2.0, 65504.0], dtype=torch.float16),
    "bf16": torch.tensor([[1.0, -0.25], [3.0, 1024.0]], dtype=torch.bfloat16),
    "steps": torch.tensor([7, -1, 2**40], dtype=torch.int64),
    "mask": torch.tensor([True, False, True]),
    "scalar": torch.tensor(2.5, dtype=torch.float64),
    "empty": torch.zeros((0, 3), dtype=torch.float32),
}
save_file(tensors, "torch_mixed.safetensors", metadata={"format": "pt", "step": "42"})
