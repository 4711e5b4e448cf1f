"""One-core GEMM speed at the GPT's Linear shapes, XLA (through JAX) or
PyTorch's BLAS: what bounds the GPT step (docs/BENCHMARKS.md).

    taskset -c 0 ~/.cache/xladdp/peers/jax/bin/python gemm.py jax
    OMP_NUM_THREADS=1 LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread taskset -c 0 python3 gemm.py torch
"""

import os
import sys
import time

import numpy as np

SHAPES = [(2048, 128, 384), (2048, 128, 512), (2048, 512, 128), (2048, 128, 128)]


def rate(f, m, k, n, reps=50):
    f()
    start = time.perf_counter()
    for _ in range(reps):
        r = f()
    if hasattr(r, "block_until_ready"):
        r.block_until_ready()
    return 2 * m * k * n / ((time.perf_counter() - start) / reps) / 1e9


which = sys.argv[1] if len(sys.argv) > 1 else "jax"
for m, k, n in SHAPES:
    a, b = np.random.randn(m, k).astype(np.float32), np.random.randn(k, n).astype(np.float32)
    if which == "jax":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        import jax
        import jax.numpy as jnp

        ja, jb, f = jnp.asarray(a), jnp.asarray(b), jax.jit(lambda x, y: x @ y)
        g = rate(lambda: f(ja, jb), m, k, n)
    else:
        import torch

        torch.set_num_threads(1)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        g = rate(lambda: ta @ tb, m, k, n)
    print(f"{which} [{m},{k}]x[{k},{n}]: {g:.1f} GFLOP/s")
