"""JAX side of the per-op table (examples/bench/ops): each row's forward
(loss = sum(op(inputs) * cotangent)) and forward and backward (the loss
and the gradients of the inputs marked grad) under jax.jit, the cotangent
an argument (a constant would let XLA fold the forward away), at the
batch --batch, and one Adadelta update (optax's rule, written out) of the
CNN's parameters; one JSON line per row. Pin it to a core for the
one-core table: taskset -c 0 python ops_jax.py"""

import argparse
import json
import os
import statistics

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import ops_cases as oc


def conv_bias(x, w, b):
    y = lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return y + b[None, :, None, None]


def dropout(x):
    keep = jax.random.bernoulli(jax.random.key(0), 0.75, x.shape)
    return jnp.where(keep, x / 0.75, 0)


OPS = {
    oc.CONV1: conv_bias, oc.CONV2: conv_bias, oc.CONV2_DX: conv_bias, oc.CONV2_DW: conv_bias,
    oc.RELU: jax.nn.relu,
    oc.POOL: lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID"),
    oc.DROPOUT: dropout,
    oc.FC1: lambda x, w, b: x @ w + b, oc.FC2: lambda x, w, b: x @ w + b,
    oc.NLL: lambda x, y: -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(x, 1), y[:, None], 1)),
}


def adadelta(params, grads, sq, acc, rho=0.9, eps=1e-6):
    out = []
    for p, g, s, a in zip(params, grads, sq, acc):
        s = rho * s + (1 - rho) * g * g
        d = jnp.sqrt(a + eps) / jnp.sqrt(s + eps) * g
        out.append((p - d, s, rho * a + (1 - rho) * d * d))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--only", default="")
    a = p.parse_args()
    rng = np.random.default_rng(1)
    runner = f"jax {jax.__version__} jit"

    def emit(op, pass_, times):
        print(json.dumps({"runner": runner, "op": op, "pass": pass_, "batch": a.batch, "call_ms": times,
                          "median_ms": statistics.median(times)}), flush=True)

    for name in oc.ROWS:
        if a.only and a.only not in name:
            continue
        specs = oc.inputs(name, a.batch)
        ins = [jnp.asarray(rng.integers(0, 10, a.batch, dtype=np.int32)) if s == "labels"
               else jnp.asarray(rng.standard_normal(s[0], dtype=np.float32)) for s in specs]
        op = OPS[name]
        cot = jnp.asarray(rng.standard_normal(op(*ins).shape, dtype=np.float32))
        loss = lambda c, *xs: jnp.sum(op(*xs) * c)
        forward = jax.jit(loss)
        emit(name, "forward", oc.timed(lambda: forward(cot, *ins), a.samples, a.calls, jax.block_until_ready))
        argnums = tuple(1 + i for i, s in enumerate(specs) if s != "labels" and s[1])
        both = jax.jit(jax.value_and_grad(loss, argnums=argnums))
        emit(name, "forward+backward", oc.timed(lambda: both(cot, *ins), a.samples, a.calls, jax.block_until_ready))
    if not a.only or a.only in oc.ADADELTA:
        params = [jnp.asarray(rng.standard_normal(s, dtype=np.float32)) for s in oc.CNN_PARAM_SHAPES]
        grads = [jnp.asarray(rng.standard_normal(s, dtype=np.float32)) for s in oc.CNN_PARAM_SHAPES]
        zeros = [jnp.zeros(s, jnp.float32) for s in oc.CNN_PARAM_SHAPES]
        update = jax.jit(adadelta, donate_argnums=(0, 2, 3))
        state = {"p": params, "s": zeros, "a": [z + 0 for z in zeros]}

        def call():
            out = update(state["p"], grads, state["s"], state["a"])
            state["p"], state["s"], state["a"] = [o[0] for o in out], [o[1] for o in out], [o[2] for o in out]
            return state["p"][-1]

        emit(oc.ADADELTA, "update", oc.timed(call, a.samples, a.calls, jax.block_until_ready))


if __name__ == "__main__":
    main()
