"""JAX jit (and lax.scan for several steps per call) side of `make bench`:
the same model, initial weights, batch and optimizer as
examples/bench/step, one CPU device."""

import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
from jax import lax

import common
import resnet_jax

args = common.parse("jax")
state = common.load_safetensors(args.init)
RESNET = args.model == "resnet18-cifar"
if RESNET:
    params, buffers = resnet_jax.split(state)
else:
    params, buffers = {k: jnp.asarray(state[k]) for k in common.state_names(args.model, state)}, {}
x = jnp.asarray(state["batch.0.x"])
y = jnp.asarray(state["batch.0.y"])


def conv(x, w, b):
    out = lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return out + b[None, :, None, None]


def dropout(key, x, p):
    keep = jax.random.uniform(key, x.shape) >= p
    return jnp.where(keep, x / (1 - p), 0)


def forward(p, x, key, train):
    if args.model == "toy":
        h = jax.nn.relu(x @ p["0.weight"].T + p["0.bias"])
        return h @ p["2.weight"].T + p["2.bias"]
    h = jax.nn.relu(conv(x, p["0.weight"], p["0.bias"]))
    h = jax.nn.relu(conv(h, p["2.weight"], p["2.bias"]))
    h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    k1, k2 = jax.random.split(key)
    if train:
        h = dropout(k1, h, 0.25)
    h = jax.nn.relu(h.reshape(h.shape[0], -1) @ p["7.weight"].T + p["7.bias"])
    if train:
        h = dropout(k2, h, 0.5)
    return jax.nn.log_softmax(h @ p["10.weight"].T + p["10.bias"], axis=1)


def loss_fn(p, bufs, x, y, key, train=True):
    """The loss and the BatchNorm running statistics after the forward."""
    if RESNET:
        logits, bufs = resnet_jax.forward(p, bufs, x, train)
        out = jax.nn.log_softmax(logits, axis=1)
    else:
        out = forward(p, x, key, train)
    if args.model == "toy":
        return jnp.mean((out - y) ** 2), bufs
    return -jnp.mean(jnp.take_along_axis(out, y[:, None].astype(jnp.int32), axis=1)), bufs


def init_opt(p):
    if args.model == "toy":
        return {}
    z = jax.tree_util.tree_map(jnp.zeros_like, p)
    if RESNET:
        return {"buf": z}
    return {"sq": z, "acc": z}


def update(p, opt, g):
    if args.model == "toy":  # SGD lr 0.001
        return jax.tree_util.tree_map(lambda a, b: a - 0.001 * b, p, g), opt
    if RESNET:  # torch's SGD lr 0.01, momentum 0.9 (the first buffer is the gradient)
        buf = jax.tree_util.tree_map(lambda b, gg: 0.9 * b + gg, opt["buf"], g)
        return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, buf), {"buf": buf}
    rho, eps, lr = 0.9, 1e-6, 1.0  # torch's Adadelta
    sq = jax.tree_util.tree_map(lambda s, gg: rho * s + (1 - rho) * gg * gg, opt["sq"], g)
    delta = jax.tree_util.tree_map(lambda a, s, gg: jnp.sqrt(a + eps) / jnp.sqrt(s + eps) * gg, opt["acc"], sq, g)
    acc = jax.tree_util.tree_map(lambda a, d: rho * a + (1 - rho) * d * d, opt["acc"], delta)
    return jax.tree_util.tree_map(lambda a, d: a - lr * d, p, delta), {"sq": sq, "acc": acc}


def one_step(carry, _):
    p, opt, bufs, key = carry
    key, sub = jax.random.split(key)
    g, bufs = jax.grad(loss_fn, has_aux=True)(p, bufs, x, y, sub)
    p, opt = update(p, opt, g)
    return (p, opt, bufs, key), None


@jax.jit
def step(p, opt, bufs, key):
    if args.steps_per_markstep == 1:
        return one_step((p, opt, bufs, key), None)[0]
    return lax.scan(one_step, (p, opt, bufs, key), None, length=args.steps_per_markstep)[0]


initial = float(jax.jit(lambda p: loss_fn(p, buffers, x, y, jax.random.PRNGKey(0), train=False)[0])(params))
carry = (params, init_opt(params), buffers, jax.random.PRNGKey(0))
calls = lambda n: n // args.steps_per_markstep
for _ in range(calls(args.warmup)):
    carry = step(*carry)
jax.block_until_ready(carry)
times = []
for _ in range(args.samples):
    start = time.perf_counter()
    for _ in range(calls(args.steps)):
        carry = step(*carry)
    jax.block_until_ready(carry)
    times.append((time.perf_counter() - start) * 1000 / args.steps)
common.report("jax " + jax.__version__ + (" lax.scan" if args.steps_per_markstep > 1 else " jit"), args, initial, times)
