"""The BLAS each PyTorch peer runs on, chosen at its best and said.

Debian's OpenBLAS does not recognise every CPU and then falls back to a
generic kernel (PyTorch 1.13's GPT step: 406 ms by default, 142 ms with
SKYLAKEX on these Xeons), so a comparison against it would flatter us.
openblas_env() picks OPENBLAS_CORETYPE from the CPU's flags and keeps the
first candidate the library itself reports loading (openblas_get_corename);
describe() runs in a peer's own interpreter and says which BLAS, kernel and
CPU capability it used; peak() measures one core's sgemm, the table's 100%.

    python3 blas.py   # prints the choice, each peer's kernel and the peak
"""

import json
import os
import subprocess
import sys

OPENBLAS_DIR = "/usr/lib/x86_64-linux-gnu/openblas-pthread"
PEERS = os.environ.get("XLADDP_PEERS_DIR", os.path.expanduser("~/.cache/xladdp/peers"))
DEBIAN = "/usr/bin/python3"
TORCH29 = os.path.join(PEERS, "torchxla/bin/python")

# What the peer's interpreter prints about its BLAS (after importing torch,
# which loads it): the library, its kernel, the CPU capability torch uses.
DESCRIBE = r"""
import ctypes, json, torch
out = {"torch": torch.__version__, "capability": getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: "")(),
       "mkl": torch.backends.mkl.is_available(), "onednn": torch.backends.mkldnn.is_available(), "openblas": ""}
for line in open("/proc/self/maps"):
    path = line.split()[-1]
    if "openblas" in path and path.endswith((".so", ".so.0", ".so.3")) and not out["openblas"]:
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            out["openblas"] = lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            pass
print(json.dumps(out))
"""


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def candidates(flags):
    """OPENBLAS_CORETYPE names for these flags, the most specific first."""
    out = []
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        if "amx_tile" in flags:
            out.append("SAPPHIRERAPIDS")
        if "avx512_bf16" in flags:
            out.append("COOPERLAKE")
        out.append("SKYLAKEX")
    if {"avx2", "fma"} <= flags:
        out.append("HASWELL")
    return out


def describe(python, env):
    """What the peer at python, with env, loads: a dict (see DESCRIBE)."""
    full = dict(os.environ, **env, OMP_NUM_THREADS="1")
    out = subprocess.run([python, "-c", DESCRIBE], env=full, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"{python}: cannot describe its BLAS: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def openblas_env():
    """Debian's OpenBLAS at the best kernel it takes on this CPU."""
    base = {"LD_LIBRARY_PATH": OPENBLAS_DIR}
    for name in candidates(cpu_flags()):
        got = describe(DEBIAN, dict(base, OPENBLAS_CORETYPE=name))["openblas"]
        if got.lower() == name.lower():
            return dict(base, OPENBLAS_CORETYPE=name)
    return base


def line(label, d):
    blas = f"OpenBLAS kernel {d['openblas']}" if d["openblas"] else ("MKL" if d["mkl"] else "its own BLAS")
    return f"{label}: torch {d['torch']}, {blas}, oneDNN {'on' if d['onednn'] else 'off'}, CPU capability {d['capability'] or 'unknown'}"


PEAK = r"""
import time, torch
torch.set_num_threads(1)
best = 0.0
for n, reps in ((256, 200), (512, 40), (1024, 8), (2048, 3)):
    a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    torch.mm(a, b, out=c)
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b, out=c)
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t) / 1e9)
print(best)
"""


PEAK_JAX = r"""
import os, time
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp
best = 0.0
for n, reps in ((256, 200), (512, 40), (1024, 8), (2048, 3)):
    a, b = jnp.ones((n, n), jnp.float32), jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x, y: x @ y)
    f(a, b).block_until_ready()
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            r = f(a, b)
        r.block_until_ready()
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t) / 1e9)
print(best)
"""
JAX = os.path.join(PEERS, "jax/bin/python")


def peak_jax():
    """One core's best f32 matmul through XLA (JAX), as peak() measures."""
    out = subprocess.run(["taskset", "-c", "0", JAX, "-c", PEAK_JAX], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"))
    if out.returncode != 0:
        raise SystemExit(f"{JAX}: matmul peak failed: {out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def peak(python, env):
    """One core's sgemm GFLOP/s: the best of square sizes 256 to 2048
    (taskset -c 0), so that neither a cache nor memory bounds it."""
    full = dict(os.environ, **env, OMP_NUM_THREADS="1")
    out = subprocess.run(["taskset", "-c", "0", python, "-c", PEAK], env=full, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"{python}: sgemm peak failed: {out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main():
    env = openblas_env()
    print(f"OPENBLAS_CORETYPE: {env.get('OPENBLAS_CORETYPE', '(none taken: the library chooses)')}")
    print(line("PyTorch 1.13 (Debian), default OpenBLAS", describe(DEBIAN, {"LD_LIBRARY_PATH": OPENBLAS_DIR})))
    print(line("PyTorch 1.13 (Debian), as benchmarked", describe(DEBIAN, env)))
    if os.path.exists(TORCH29):
        print(line("PyTorch 2.9 (PyPI)", describe(TORCH29, {})))
    print(f"one-core sgemm peak: PyTorch 1.13 OpenBLAS {peak(DEBIAN, env):.0f} GFLOP/s"
          + (f", PyTorch 2.9 MKL {peak(TORCH29, {}):.0f} GFLOP/s" if os.path.exists(TORCH29) else "")
          + (f", XLA (JAX) {peak_jax():.0f} GFLOP/s" if os.path.exists(JAX) else ""))


if __name__ == "__main__":
    sys.exit(main())
