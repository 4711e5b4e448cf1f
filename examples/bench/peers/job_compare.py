"""`make bench`'s whole-job comparison: the seed's MNIST job (1 epoch,
global batch 64 over 2 workers, Adadelta + StepLR, DistributedSampler,
test pass) as examples/mnist under ddprun and under --spawn, and as the
PyTorch DDP script mnist_torch.py under ddprun with PyTorch 2.9 from PyPI
(MKL, oneDNN) and Debian's 1.13 (OpenBLAS at the best kernel it takes here,
blas.py), one thread per rank, alternating round by round; prints which BLAS
each PyTorch used and a markdown table of median training seconds,
samples/s, the ratio to the best PyTorch and test accuracy.

    python3 job_compare.py --bin bin --rounds 2"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

import blas

HERE = os.path.dirname(os.path.abspath(__file__))
DONE = re.compile(r"test accuracy ([0-9.]+)%.*?, ([0-9.]+)(ms|s|m[0-9.]+s) training, ([0-9.]+) samples/s")


def seconds(value, unit):
    if unit == "ms":
        return float(value) / 1000
    if unit == "s":
        return float(value)
    return float(value) * 60 + float(unit[1:-1])


def ours(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    m = DONE.search(out.stdout)
    if out.returncode != 0 or not m:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return seconds(m.group(2), m.group(3)), float(m.group(4)), float(m.group(1)) / 100


def torch_with(env):
    return lambda cmd: torch(cmd, env)


def torch(cmd, env):
    out = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True, timeout=1800)
    lines = [l for l in out.stdout.splitlines() if '"training_s"' in l]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    r = json.loads(lines[-1][lines[-1].index("{"):])
    return r["training_s"], r["samples_per_s"], r["test_accuracy"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default="bin")
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    openblas = blas.openblas_env()
    print(blas.line("PyTorch 1.13 (Debian), as run", blas.describe(blas.DEBIAN, openblas)))
    print(blas.line("PyTorch 2.9 (PyPI), as run", blas.describe(blas.TORCH29, {})))
    ddprun, mnist = os.path.join(a.bin, "ddprun"), os.path.join(a.bin, "mnist")
    runners = [
        ("xladdp: ddprun --nproc_per_node=2 bin/mnist", ours, [ddprun, "--nproc_per_node=2", mnist, "--log-interval", "100000"]),
        ("xladdp: bin/mnist --spawn --cpu-devices 2", ours, [mnist, "--spawn", "--cpu-devices", "2", "--log-interval", "100000"]),
        ("PyTorch 2.9 DDP gloo: ddprun --nproc_per_node=2 mnist_torch.py", torch_with({}),
         [ddprun, "--nproc_per_node=2", blas.TORCH29, os.path.join(HERE, "mnist_torch.py")]),
        ("PyTorch 1.13 DDP gloo: ddprun --nproc_per_node=2 mnist_torch.py", torch_with(openblas),
         [ddprun, "--nproc_per_node=2", blas.DEBIAN, os.path.join(HERE, "mnist_torch.py")]),
    ]
    results = {}
    for rnd in range(a.rounds):
        for name, run, cmd in runners:
            results.setdefault(name, []).append(run(cmd))
            print(f"round {rnd + 1}: {name}: {results[name][-1]}", file=sys.stderr)
    torch_rate = max(statistics.median(r[1] for r in results[n]) for n, _, _ in runners if n.startswith("PyTorch"))
    print("| job | training s (median) | samples/s | vs the best PyTorch | test accuracy |")
    print("|---|---|---|---|---|")
    for name, _, _ in runners:
        rs = results[name]
        rate = statistics.median(r[1] for r in rs)
        print(f"| {name} | {statistics.median(r[0] for r in rs):.1f} | {rate:.0f} | {rate / torch_rate:.2f} | "
              + ", ".join(f"{100 * r[2]:.2f}%" for r in rs) + " |")


if __name__ == "__main__":
    main()
