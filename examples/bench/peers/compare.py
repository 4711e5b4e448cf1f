"""`make bench`'s side-by-side comparison: runs xladdp's examples/bench/step
and the peers (JAX jit / lax.scan, torch-xla PJRT CPU, PyTorch 2.9 from
PyPI (MKL, oneDNN) eager and DDP over gloo, Debian's PyTorch 1.13 eager with
its reference BLAS and with OpenBLAS at the best kernel it takes here
(blas.py sets OPENBLAS_CORETYPE), PyTorch DDP over gloo) on the
MNIST CNN, the toy MLP, ResNet-18 (CIFAR-10 stem) and examples/gpt's small
GPT (AdamW groups, clipping; JAX and PyTorch from gpt_jax.py and
gpt_torch.py), with the same
initial weights and batches, alternating runners round by round, and
prints which BLAS and kernel each PyTorch used, one core's measured sgemm
peak, and a markdown table of medians (warm-up excluded) with each step's
GFLOP/s and % of that peak, and ratios to the best peer and to xladdp. Every runner's eval-mode loss of the initial weights must agree with
xladdp's within 1e-3, or the comparison stops.

    python3 compare.py --step-bin bin/benchstep --rounds 2 [--json out.json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import blas

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS = os.environ.get("XLADDP_PEERS_DIR", os.path.expanduser("~/.cache/xladdp/peers"))
JAX = os.path.join(PEERS, "jax/bin/python")
TORCHXLA = os.path.join(PEERS, "torchxla/bin/python")
DEBIAN = "/usr/bin/python3"
# Debian's OpenBLAS; main() adds the OPENBLAS_CORETYPE blas.py finds best.
OPENBLAS = {"LD_LIBRARY_PATH": "/usr/lib/x86_64-linux-gnu/openblas-pthread"}
T29 = TORCHXLA  # PyTorch 2.9 from PyPI lives in torch-xla's venv
T29_ONE = {"OMP_NUM_THREADS": "1"}

# Training FLOPs per sample: 3x the forward's matmuls and convolutions
# (elementwise work left out). cnn: conv 1->32 and 32->64 (3x3), fc
# 9216->128->10: 11.99 M multiply-adds; toy: 10->10->5; ResNet-18 with the
# CIFAR stem at 32x32: 0.555 G multiply-adds; gpt (4x128, block 64, 65
# symbols): 860,288 multiply-adds a token with attention, 64 tokens.
FLOPS_PER_SAMPLE = {"cnn": 3 * 2 * 11_992_448, "cnn32": 3 * 2 * 11_992_448, "toy": 3 * 2 * 150,
                    "resnet18-cifar": 106.6e9 / 32, "gpt": 3 * 2 * 860_288 * 64, "gpt16": 3 * 2 * 860_288 * 64}
# libblas3's reference BLAS; without it on the path, libblas.so.3 is
# whatever Debian's alternatives chose (OpenBLAS once it is installed).
REFBLAS = {"LD_LIBRARY_PATH": "/usr/lib/x86_64-linux-gnu/blas"}


def cases(step_bin, init):
    cnn, toy = init["cnn"], init["toy"]
    go = lambda *a: ([step_bin, *a], {})
    # The same binary with XLA's own convolutions: before oneDNN's (issue 45).
    xla_conv = lambda cmd_env: (cmd_env[0], dict(cmd_env[1], XLADDP_CPU_KERNELS="xla"))
    py = lambda exe, script, *a, env=None: ([exe, os.path.join(HERE, script), *a], env or {})
    # 20 warm-up steps: a lazy step's buffers are freed by Go's collector,
    # which MarkStep paces every 256 MiB of buffers made (~15 CNN steps);
    # the seed's job runs 938 steps, so its steady state is what counts.
    cnn_timing = ["--steps", "5", "--warmup", "20", "--samples", "10"]
    toy_timing = ["--steps", "1000", "--warmup", "20", "--samples", "7"]
    async_cpu = {"XLADDP_CPU_EXECUTION": "async"}
    pin = lambda cmd_env: (["taskset", "-c", "0", *cmd_env[0]], cmd_env[1])
    one_thread = dict(OPENBLAS, OMP_NUM_THREADS="1")
    cnn32 = init["cnn32"]
    resnet = init["resnet18-cifar"]
    resnet_timing = ["--steps", "3", "--warmup", "2", "--samples", "3"]
    resnet_go = lambda *a: go("--model", "resnet18-cifar", *a, *resnet_timing)
    resnet_py = lambda exe, script, *a, env=None: py(exe, script, "--model", "resnet18-cifar", "--init", resnet, *a, *resnet_timing, env=env)
    gpt_timing = ["--steps", "5", "--warmup", "10", "--samples", "6"]
    gpt_go = lambda *a: go("--model", "gpt", *a, *gpt_timing)
    gpt_py = lambda exe, script, init_file, *a, env=None: py(exe, script, "--model", "gpt", "--init", init_file, *a, *gpt_timing, env=env)
    return [
        ("GPT 4x128 block 64, batch 32, one core (taskset -c 0)", "gpt", [
            ("xladdp", pin(gpt_go())),
            ("xladdp compiled", pin(gpt_go("--mode", "compiled"))),
            ("JAX jit", pin(gpt_py(JAX, "gpt_jax.py", init["gpt"]))),
            ("PyTorch 1.13 eager, OpenBLAS, 1 thread", pin(gpt_py(DEBIAN, "gpt_torch.py", init["gpt"], "--threads", "1", env=one_thread))),
            ("PyTorch 2.9 eager, MKL, 1 thread", pin(gpt_py(T29, "gpt_torch.py", init["gpt"], "--threads", "1", env=T29_ONE))),
        ]),
        ("GPT 4x128 block 64, batch 16 per worker, 2 processes x 1 core", "gpt16", [
            ("xladdp ddp.Wrap (host path)", gpt_go("--batch", "16", "--processes", "2")),
            ("PyTorch 1.13 DDP gloo 2x1 thread, OpenBLAS", gpt_py(DEBIAN, "gpt_torch.py", init["gpt16"], "--replicas", "2", env=OPENBLAS)),
            ("PyTorch 2.9 DDP gloo 2x1 thread, MKL", gpt_py(T29, "gpt_torch.py", init["gpt16"], "--replicas", "2")),
        ]),
        ("GPT 4x128 block 64, batch 32, 1 device", "gpt", [
            ("xladdp", gpt_go()),
            ("JAX jit", gpt_py(JAX, "gpt_jax.py", init["gpt"])),
            ("PyTorch 1.13 eager, OpenBLAS", gpt_py(DEBIAN, "gpt_torch.py", init["gpt"], env=OPENBLAS)),
        ]),
        ("ResNet-18 CIFAR, batch 32, 1 device", "resnet18-cifar", [
            ("xladdp", resnet_go()),
            ("xladdp compiled", resnet_go("--mode", "compiled")),
            ("JAX jit", resnet_py(JAX, "step_jax.py")),
            ("torch-xla", resnet_py(TORCHXLA, "step_torchxla.py")),
            ("PyTorch 1.13 eager, OpenBLAS", resnet_py(DEBIAN, "step_torch.py", env=OPENBLAS)),
        ]),
        ("ResNet-18 CIFAR, batch 32, one core (taskset -c 0)", "resnet18-cifar", [
            ("xladdp", pin(resnet_go())),
            ("xladdp compiled", pin(resnet_go("--mode", "compiled"))),
            ("xladdp, XLA's convolutions", pin(xla_conv(resnet_go()))),
            ("JAX jit", pin(resnet_py(JAX, "step_jax.py"))),
            ("torch-xla", pin(resnet_py(TORCHXLA, "step_torchxla.py"))),
            ("PyTorch 1.13 eager, OpenBLAS, 1 thread", pin(resnet_py(DEBIAN, "step_torch.py", "--threads", "1", env=one_thread))),
            ("PyTorch 2.9 eager, MKL, 1 thread", pin(resnet_py(T29, "step_torch.py", "--threads", "1", env=T29_ONE))),
        ]),
        ("ResNet-18 CIFAR, batch 32 per worker, 2 processes x 1 core", "resnet18-cifar", [
            ("xladdp ddp.Wrap (host path)", resnet_go("--processes", "2")),
            ("xladdp ddp.Wrap, XLA's convolutions", xla_conv(resnet_go("--processes", "2"))),
            ("PyTorch 1.13 DDP gloo 2x1 thread, OpenBLAS", resnet_py(DEBIAN, "step_torch.py", "--replicas", "2", env=OPENBLAS)),
            ("PyTorch 2.9 DDP gloo 2x1 thread, MKL", resnet_py(T29, "step_torch.py", "--replicas", "2")),
        ]),
        ("MNIST CNN, batch 64, one core (taskset -c 0)", "cnn", [
            ("xladdp", pin(go("--model", "cnn", *cnn_timing))),
            ("xladdp compiled", pin(go("--model", "cnn", "--mode", "compiled", *cnn_timing))),
            ("xladdp, XLA's convolutions", pin(xla_conv(go("--model", "cnn", *cnn_timing)))),
            ("JAX jit", pin(py(JAX, "step_jax.py", "--model", "cnn", "--init", cnn, *cnn_timing))),
            ("PyTorch 1.13 eager, OpenBLAS, 1 thread", pin(py(DEBIAN, "step_torch.py", "--model", "cnn", "--threads", "1", "--init", cnn, *cnn_timing, env=one_thread))),
            ("PyTorch 2.9 eager, MKL, 1 thread", pin(py(T29, "step_torch.py", "--model", "cnn", "--threads", "1", "--init", cnn, *cnn_timing, env=T29_ONE))),
        ]),
        ("MNIST CNN, batch 32 per worker (the seed's), 2 processes x 1 core", "cnn32", [
            ("xladdp ddp.Wrap (host path)", go("--model", "cnn", "--batch", "32", "--processes", "2", *cnn_timing)),
            ("xladdp ddp.Wrap, XLA's convolutions", xla_conv(go("--model", "cnn", "--batch", "32", "--processes", "2", *cnn_timing))),
            ("PyTorch 1.13 DDP gloo 2x1 thread, OpenBLAS", py(DEBIAN, "step_torch.py", "--model", "cnn", "--replicas", "2", "--init", cnn32, *cnn_timing, env=OPENBLAS)),
            ("PyTorch 2.9 DDP gloo 2x1 thread, MKL", py(T29, "step_torch.py", "--model", "cnn", "--replicas", "2", "--init", cnn32, *cnn_timing)),
        ]),
        ("MNIST CNN, batch 64, 1 device", "cnn", [
            ("xladdp", go("--model", "cnn", *cnn_timing)),
            ("xladdp compiled", go("--model", "cnn", "--mode", "compiled", *cnn_timing)),
            ("xladdp ddp.Wrap", go("--model", "cnn", "--ddp", *cnn_timing)),
            ("JAX jit", py(JAX, "step_jax.py", "--model", "cnn", "--init", cnn, *cnn_timing)),
            ("torch-xla", py(TORCHXLA, "step_torchxla.py", "--model", "cnn", "--init", cnn, *cnn_timing)),
            ("PyTorch 1.13 eager, reference BLAS", py(DEBIAN, "step_torch.py", "--model", "cnn", "--init", cnn, *cnn_timing, env=REFBLAS)),
            ("PyTorch 1.13 eager, OpenBLAS", py(DEBIAN, "step_torch.py", "--model", "cnn", "--init", cnn, *cnn_timing, env=OPENBLAS)),
        ]),
        ("MNIST CNN, batch 64 per worker, 2 workers", "cnn", [
            ("xladdp (2 replicas in-graph)", go("--model", "cnn", "--replicas", "2", *cnn_timing)),
            ("xladdp compiled (2 replicas in-graph)", go("--model", "cnn", "--replicas", "2", "--mode", "compiled", *cnn_timing)),
            ("xladdp ddp.Wrap (2 replicas in-graph)", go("--model", "cnn", "--replicas", "2", "--ddp", *cnn_timing)),
            ("xladdp ddp.Wrap (2 processes x 1 device, host path)", go("--model", "cnn", "--processes", "2", *cnn_timing)),
            ("PyTorch 1.13 DDP gloo 2x1 thread, reference BLAS", py(DEBIAN, "step_torch.py", "--model", "cnn", "--replicas", "2", "--init", cnn, *cnn_timing, env=REFBLAS)),
            ("PyTorch 1.13 DDP gloo 2x1 thread, OpenBLAS", py(DEBIAN, "step_torch.py", "--model", "cnn", "--replicas", "2", "--init", cnn, *cnn_timing, env=OPENBLAS)),
        ]),
        ("toy MLP, 1 step per MarkStep/call", "toy", [
            ("xladdp lazy", go("--model", "toy", *toy_timing)),
            ("xladdp compiled", go("--model", "toy", "--mode", "compiled", *toy_timing)),
            ("xladdp compiled, XLADDP_CPU_EXECUTION=async", ([step_bin, "--model", "toy", "--mode", "compiled", *toy_timing], async_cpu)),
            ("JAX jit", py(JAX, "step_jax.py", "--model", "toy", "--init", toy, *toy_timing)),
            ("torch-xla", py(TORCHXLA, "step_torchxla.py", "--model", "toy", "--init", toy, *toy_timing)),
            ("PyTorch 1.13 eager, OpenBLAS", py(DEBIAN, "step_torch.py", "--model", "toy", "--init", toy, *toy_timing, env=OPENBLAS)),
        ]),
        ("toy MLP, batch 20 per worker, 2 workers", "toy", [
            ("xladdp ddp.Wrap (2 replicas in-graph)", go("--model", "toy", "--replicas", "2", "--ddp", *toy_timing)),
            ("xladdp ddp.Wrap (2 processes x 1 device, host path)", go("--model", "toy", "--processes", "2", *toy_timing)),
            ("PyTorch 1.13 DDP gloo 2x1 thread, OpenBLAS", py(DEBIAN, "step_torch.py", "--model", "toy", "--replicas", "2", "--init", toy, *toy_timing, env=OPENBLAS)),
        ]),
        ("toy MLP, 10 steps per MarkStep/call", "toy", [
            ("xladdp lazy", go("--model", "toy", "--steps-per-markstep", "10", *toy_timing)),
            ("xladdp compiled", go("--model", "toy", "--mode", "compiled", "--steps-per-markstep", "10", *toy_timing)),
            ("JAX lax.scan", py(JAX, "step_jax.py", "--model", "toy", "--steps-per-markstep", "10", "--init", toy, *toy_timing)),
            ("torch-xla", py(TORCHXLA, "step_torchxla.py", "--model", "toy", "--steps-per-markstep", "10", "--init", toy, *toy_timing)),
        ]),
    ]


def run(cmd, env):
    full = dict(os.environ, **env)
    out = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    global OPENBLAS
    p = argparse.ArgumentParser()
    p.add_argument("--step-bin", required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--only", default="", help="run only cases whose title contains this")
    p.add_argument("--json", default="")
    a = p.parse_args()
    OPENBLAS = blas.openblas_env()
    print(f"OPENBLAS_CORETYPE={OPENBLAS.get('OPENBLAS_CORETYPE', '(the library chooses)')}")
    print(blas.line("PyTorch 1.13 (Debian), as run", blas.describe(DEBIAN, OPENBLAS)))
    print(blas.line("PyTorch 2.9 (PyPI), as run", blas.describe(T29, {})))
    peak = max(blas.peak(DEBIAN, OPENBLAS), blas.peak(T29, {}))
    print(f"one core's sgemm peak (square 256 to 2048, the better of OpenBLAS and MKL): {peak:.0f} GFLOP/s; % of peak is against it "
          f"times the cores a case uses (one core: 1; 2 processes x 1 core: 2; else {os.cpu_count()})\n")
    tmp = tempfile.mkdtemp(prefix="xladdp-bench-")
    init = {}
    for model in ("cnn", "toy"):
        init[model] = os.path.join(tmp, f"{model}.safetensors")
        subprocess.run([a.step_bin, "--model", model, "--replicas", "2", "--init-out", init[model]], check=True)
    init["cnn32"] = os.path.join(tmp, "cnn32.safetensors")
    subprocess.run([a.step_bin, "--model", "cnn", "--batch", "32", "--replicas", "2", "--init-out", init["cnn32"]], check=True)
    for name, batch in (("gpt", "32"), ("gpt16", "16")):
        init[name] = os.path.join(tmp, f"{name}.safetensors")
        subprocess.run([a.step_bin, "--model", "gpt", "--batch", batch, "--replicas", "2", "--init-out", init[name]], check=True)
    init["resnet18-cifar"] = os.path.join(tmp, "resnet18-cifar.safetensors")
    subprocess.run([a.step_bin, "--model", "resnet18-cifar", "--replicas", "2", "--init-out", init["resnet18-cifar"]], check=True)
    table = cases(a.step_bin, init)
    table = [c for c in table if a.only in c[0]]
    samples = {}
    meta = {}
    for rnd in range(a.rounds):
        for title, _, runners in table:
            for name, (cmd, env) in runners:
                res = run(cmd, env)
                print(f"round {rnd + 1}: {title}: {name}: median {res['median_step_ms']:.4f} ms/step", file=sys.stderr)
                samples.setdefault((title, name), []).extend(res["step_ms"])
                meta[(title, name)] = res
    rows, notes = [], []
    print("| case | runner | ms/step (median) | samples/s | GFLOP/s | % of peak | best peer's time / this | vs xladdp | initial loss |")
    print("|---|---|---|---|---|---|---|---|---|")
    for title, model, runners in table:
        ours = None
        peers = [statistics.median(samples[(title, n)]) for n, _ in runners if not n.startswith("xladdp")]
        best = min(peers) if peers else None
        for name, _ in runners:
            med = statistics.median(samples[(title, name)])
            res = meta[(title, name)]
            if ours is None:
                ours, ours_loss = med, res["initial_loss"]
            if abs(res["initial_loss"] - ours_loss) > 1e-3:
                raise SystemExit(f"{title}: {name}'s initial loss {res['initial_loss']} differs from xladdp's {ours_loss}")
            batch = {"cnn": 64, "cnn32": 32, "toy": 20, "resnet18-cifar": 32, "gpt": 32, "gpt16": 16}[model] * res["replicas"] * res.get("processes", 1)
            label = res["runner"] if name.startswith("xladdp") is False else name
            gflops = FLOPS_PER_SAMPLE[model] * batch / (med / 1000) / 1e9
            cores = 1 if "one core" in title else 2 if "x 1 core" in title else os.cpu_count()
            vs_best = f"{best / med:.2f}x" if best else ""
            print(f"| {title} | {label} | {med:.4g} | {batch / (med / 1000):.0f} | {gflops:.1f} | {100 * gflops / (peak * cores):.0f}% | {vs_best} | "
                  f"{med / ours:.2f}x | {res['initial_loss']:.6f} |")
            rows.append({"case": title, "runner": res["runner"], "name": name, "median_ms": med,
                         "samples": samples[(title, name)], "initial_loss": res["initial_loss"]})
            conv = res.get("onednn_convolutions")
            if conv:
                notes.append(f"{title}, {name}: convolutions in oneDNN {conv['ms']:.4g} ms a replica step ({100 * conv['ms'] / med:.0f}% of it), "
                             f"{conv['gflops']:.0f} GFLOP/s = {100 * conv['gflops'] / peak:.0f}% of one core's peak")
    print()
    for n in notes:
        print(n)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
