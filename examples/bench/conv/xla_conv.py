"""One core's convolution passes in XLA (through JAX 0.12, the compiler
xladdp shares) at onednn_conv.cc's shapes: forward, input gradient and
weight gradient, NCHW as xladdp lowers them; GFLOP/s, the median of 7.

    taskset -c 0 ~/.cache/xladdp/peers/jax/bin/python xla_conv.py
"""
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax
import jax.numpy as jnp
import numpy as np

SHAPES = [(32, 64, 32, 64, 1), (32, 128, 16, 128, 1), (32, 256, 8, 256, 1), (32, 512, 4, 512, 1), (32, 64, 32, 128, 2)]


def conv(x, w, stride):
    return jax.lax.conv_general_dilated(x, w, (stride, stride), ((1, 1), (1, 1)), dimension_numbers=("NCHW", "OIHW", "NCHW"))


def median_ms(f, *args):
    jax.block_until_ready(f(*args))
    t = []
    for _ in range(7):
        s = time.perf_counter()
        jax.block_until_ready(f(*args))
        t.append((time.perf_counter() - s) * 1000)
    return sorted(t)[3]


for n, c, h, k, stride in SHAPES:
    oh = (h + 2 - 3) // stride + 1
    flops = 2.0 * n * k * oh * oh * c * 9
    x = jnp.asarray(np.random.randn(n, c, h, h).astype(np.float32))
    w = jnp.asarray(np.random.randn(k, c, 3, 3).astype(np.float32))
    dy = jnp.asarray(np.random.randn(n, k, oh, oh).astype(np.float32))
    fwd = jax.jit(lambda x, w: conv(x, w, stride))
    dx = jax.jit(lambda x, w, dy: jax.vjp(lambda x: conv(x, w, stride), x)[1](dy)[0])
    dw = jax.jit(lambda x, w, dy: jax.vjp(lambda w: conv(x, w, stride), w)[1](dy)[0])
    f, d, g = median_ms(fwd, x, w), median_ms(dx, x, w, dy), median_ms(dw, x, w, dy)
    print(f"xla {n}x{c}x{h}x{h} -> {k} stride {stride}: forward {flops / f / 1e6:.1f}, input gradient {flops / d / 1e6:.1f}, "
          f"weight gradient {flops / g / 1e6:.1f} GFLOP/s")
