"""JAX jit side of `make bench`'s GPT: examples/gpt's small model written in
jax.numpy (pre-LN blocks, torch's packed attention projection, exact GELU,
a head tied to the embedding), AdamW with decay groups (lr 1e-3, betas
0.9/0.99, weight decay 0.1 on matrices, torch's bias correction) and a
global-norm clip at 1, all in one jitted step, from the weights and batch
examples/bench/step --init-out wrote; one CPU device."""

import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp

import common

args = common.parse("jax")
V, LAYERS, HEADS, WIDTH = 65, 4, 4, 128
state = common.load_safetensors(args.init)
params = {k: jnp.asarray(v) for k, v in state.items() if not k.startswith("batch.") and k != "head.weight"}
x = jnp.asarray(state["batch.0.x"])
y = jnp.asarray(state["batch.0.y"])


def layer_norm(h, p, name):
    mu = h.mean(-1, keepdims=True)
    var = ((h - mu) ** 2).mean(-1, keepdims=True)
    return (h - mu) / jnp.sqrt(var + 1e-5) * p[name + ".weight"] + p[name + ".bias"]


def attention(h, p, pre):
    b, t, e = h.shape
    hd = e // HEADS
    qkv = h @ p[pre + "in_proj_weight"].T + p[pre + "in_proj_bias"]
    q, k, v = (qkv[..., i * e:(i + 1) * e].reshape(b, t, HEADS, hd).transpose(0, 2, 1, 3) for i in range(3))
    scores = (q / jnp.sqrt(hd)) @ k.transpose(0, 1, 3, 2)
    keep = jnp.tril(jnp.ones((t, t), dtype=bool))
    w = jax.nn.softmax(jnp.where(keep, scores, -jnp.inf), axis=-1)
    out = (w @ v).transpose(0, 2, 1, 3).reshape(b, t, e)
    return out @ p[pre + "out_proj.weight"].T + p[pre + "out_proj.bias"]


def forward(p, ids):
    t = ids.shape[1]
    h = p["tok_emb.weight"][ids] + p["pos_emb.weight"][jnp.arange(t)]
    for i in range(LAYERS):
        pre = f"blocks.{i}."
        h = h + attention(layer_norm(h, p, pre + "ln_1"), p, pre + "attn.")
        m = layer_norm(h, p, pre + "ln_2") @ p[pre + "mlp.0.weight"].T + p[pre + "mlp.0.bias"]
        m = jax.nn.gelu(m, approximate=False)
        h = h + m @ p[pre + "mlp.2.weight"].T + p[pre + "mlp.2.bias"]
    return layer_norm(h, p, "ln_f") @ p["tok_emb.weight"].T


def loss_fn(p, ids, targets):
    logits = forward(p, ids).reshape(-1, V)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[:, None].astype(jnp.int32), axis=1))


def step(p, opt, ids, targets):
    grads = jax.grad(loss_fn)(p, ids, targets)
    norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree_util.tree_leaves(grads)))
    scale = jnp.minimum(1.0 / (norm + 1e-6), 1.0)
    t = opt["t"] + 1
    new_p, m, v = {}, {}, {}
    for k in p:
        g = grads[k] * scale
        wd = 0.1 if p[k].ndim >= 2 else 0.0
        pk = p[k] * (1 - 1e-3 * wd)
        m[k] = 0.9 * opt["m"][k] + 0.1 * g
        v[k] = 0.99 * opt["v"][k] + 0.01 * g * g
        denom = jnp.sqrt(v[k]) / jnp.sqrt(1 - 0.99 ** t) + 1e-8
        new_p[k] = pk - 1e-3 * m[k] / denom / (1 - 0.9 ** t)
    return new_p, {"t": t, "m": m, "v": v}


jstep = jax.jit(step, donate_argnums=(0, 1))
zeros = {k: jnp.zeros_like(v) for k, v in params.items()}
opt = {"t": jnp.zeros((), jnp.float32), "m": zeros, "v": {k: jnp.zeros_like(v) for k, v in params.items()}}
initial = float(jax.jit(loss_fn)(params, x, y))
for _ in range(args.warmup):
    params, opt = jstep(params, opt, x, y)
jax.block_until_ready(params)
times = []
for _ in range(args.samples):
    start = time.perf_counter()
    for _ in range(args.steps):
        params, opt = jstep(params, opt, x, y)
    jax.block_until_ready(params)
    times.append((time.perf_counter() - start) * 1000 / args.steps)
common.report(f"jax {jax.__version__} jit", args, initial, times)
