"""JAX side of the per-op table (examples/bench/ops): each op's forward and
backward pass at the MNIST CNN's shapes (batch 64) under jax.jit, loss =
sum(op(inputs) * a fixed cotangent), gradients with respect to every
input; one JSON line per op, like the Go command."""

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))


CASES = [
    ("linear 9216->128", [(64, 9216), (9216, 128), (128,)], lambda x, w, b: x @ w + b),
    ("conv2d 32->64 3x3 on 26x26", [(64, 32, 26, 26), (64, 32, 3, 3)], conv),
    ("conv2d 1->32 3x3 on 28x28", [(64, 1, 28, 28), (32, 1, 3, 3)], conv),
    ("max_pool2d 2x2 on 64x24x24", [(64, 64, 24, 24)],
     lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")),
    ("relu on 64x24x24", [(64, 64, 24, 24)], jax.nn.relu),
    ("log_softmax over 10", [(64, 10)], lambda x: jax.nn.log_softmax(x, axis=1)),
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--only", default="")
    a = p.parse_args()
    rng = np.random.default_rng(1)
    for name, shapes, op in CASES:
        if a.only and a.only not in name:
            continue
        inputs = [jnp.asarray(rng.standard_normal(s, dtype=np.float32)) for s in shapes]
        cot = jnp.asarray(rng.standard_normal(op(*inputs).shape, dtype=np.float32))
        grad = jax.jit(jax.grad(lambda *xs: jnp.sum(op(*xs) * cot), argnums=tuple(range(len(inputs)))))
        for _ in range(2):
            grad(*inputs)[0].block_until_ready()
        times = []
        for _ in range(a.samples):
            start = time.perf_counter()
            for _ in range(a.calls):
                grad(*inputs)[0].block_until_ready()
            times.append((time.perf_counter() - start) * 1000 / a.calls)
        print(json.dumps({"runner": f"jax {jax.__version__} jit", "op": name, "call_ms": times,
                          "median_ms": statistics.median(times)}), flush=True)


if __name__ == "__main__":
    main()
