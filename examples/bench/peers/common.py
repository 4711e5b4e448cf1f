"""What the peer benchmark scripts share: reading the initial state that
`go run ./examples/bench/step --init-out` writes (safetensors, torch names
and layouts), the command line, and the JSON line every runner prints."""

import argparse
import json
import statistics
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        start, end = v["data_offsets"]
        out[name] = np.frombuffer(data[base + start : base + end], dtype=DTYPES[v["dtype"]]).reshape(v["shape"]).copy()
    return out


def parse(runner):
    p = argparse.ArgumentParser(description=f"{runner}: time a benchmark training step")
    p.add_argument("--model", choices=["cnn", "toy", "resnet18-cifar", "gpt"], default="cnn")
    p.add_argument("--init", required=True, help="safetensors from examples/bench/step --init-out")
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--steps", type=int, default=5, help="steps per timed sample")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps-per-markstep", type=int, default=1, help="steps per program (mark_step / lax.scan)")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (PyTorch eager)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where PyTorch runs the steps (the GPU check: cuda)")
    return p.parse_args()


# The models, in torch's module numbering (nn.Sequential indices).
CNN_PARAMS = ["0.weight", "0.bias", "2.weight", "2.bias", "7.weight", "7.bias", "10.weight", "10.bias"]
TOY_PARAMS = ["0.weight", "0.bias", "2.weight", "2.bias"]
BATCH = {"cnn": 64, "toy": 20, "resnet18-cifar": 32, "gpt": 32}


def state_names(model, state):
    """The model's state dict entries in the init file (parameters and
    buffers, without the batches)."""
    if model == "cnn":
        return CNN_PARAMS
    if model == "toy":
        return TOY_PARAMS
    return [k for k in state if not k.startswith("batch.")]


def report(runner, args, initial_loss, step_ms, extra=None):
    med = statistics.median(step_ms)
    res = {
        "runner": runner,
        "model": args.model,
        "replicas": args.replicas,
        "steps_per_markstep": args.steps_per_markstep,
        "initial_loss": float(initial_loss),
        "step_ms": step_ms,
        "median_step_ms": med,
        "samples_per_s": BATCH[args.model] * args.replicas / (med / 1000),
    }
    if extra:
        res.update(extra)
    json.dump(res, sys.stdout)
    sys.stdout.write("\n")
