"""JAX's pmap of the toy step over 2 CPU devices: the reference for the
CPU plugin's fixed cost of a multi-device execution (docs/BENCHMARKS.md).

    ~/.cache/xladdp/peers/jax/bin/python examples/bench/peers/toy_pmap_jax.py
"""
import os, time
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, jax.numpy as jnp, numpy as np
from functools import partial
def loss(p, x, y):
    h = jax.nn.relu(x @ p["w1"].T + p["b1"]); o = h @ p["w2"].T + p["b2"]
    return jnp.mean((o - y) ** 2)
@partial(jax.pmap, axis_name="r", donate_argnums=0)
def step(p, x, y):
    g = jax.grad(loss)(p, x, y)
    g = jax.lax.pmean(g, "r")
    return jax.tree.map(lambda a, b: a - 0.001 * b, p, g)
rng = np.random.default_rng(0)
p = {"w1": rng.normal(size=(10,10)).astype(np.float32), "b1": np.zeros(10, np.float32), "w2": rng.normal(size=(5,10)).astype(np.float32), "b2": np.zeros(5, np.float32)}
p = jax.tree.map(lambda a: jnp.stack([a, a]), p)
x = jnp.asarray(rng.normal(size=(2,20,10)).astype(np.float32)); y = jnp.asarray(rng.normal(size=(2,20,5)).astype(np.float32))
for _ in range(50): p = step(p, x, y)
jax.block_until_ready(p)
for _ in range(5):
    t = time.perf_counter()
    for _ in range(1000): p = step(p, x, y)
    jax.block_until_ready(p)
    print(f"{(time.perf_counter()-t)/1000*1e6:.1f} us/step")
