"""ResNet-18 with the CIFAR-10 stem in JAX, on the torch state dict that
examples/bench/step --init-out writes (torchvision's names): the JAX side
of the ResNet-18 rows of `make bench`. BatchNorm normalizes by the batch in
training and updates the running statistics as torch does (momentum 0.1,
unbiased variance)."""

import jax.numpy as jnp
from jax import lax

MOMENTUM, EPS = 0.1, 1e-5


def split(state):
    """The trainable parameters and the BatchNorm running statistics."""
    keys = [k for k in state if not k.startswith("batch.") and not k.endswith("num_batches_tracked")]
    params = {k: jnp.asarray(state[k]) for k in keys if not k.endswith(("running_mean", "running_var"))}
    buffers = {k: jnp.asarray(state[k]) for k in keys if k.endswith(("running_mean", "running_var"))}
    return params, buffers


def conv(x, w, stride):
    pad = (w.shape[2] - 1) // 2
    return lax.conv_general_dilated(x, w, (stride, stride), ((pad, pad), (pad, pad)),
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"))


def batch_norm(p, bufs, new, name, x, train):
    w, b = p[name + ".weight"][None, :, None, None], p[name + ".bias"][None, :, None, None]
    if not train:
        mean, var = bufs[name + ".running_mean"], bufs[name + ".running_var"]
    else:
        mean = jnp.mean(x, axis=(0, 2, 3))
        var = jnp.mean(jnp.square(x - mean[None, :, None, None]), axis=(0, 2, 3))
        n = x.size / x.shape[1]
        new[name + ".running_mean"] = (1 - MOMENTUM) * bufs[name + ".running_mean"] + MOMENTUM * lax.stop_gradient(mean)
        new[name + ".running_var"] = (1 - MOMENTUM) * bufs[name + ".running_var"] + MOMENTUM * lax.stop_gradient(var * n / (n - 1))
    inv = lax.rsqrt(var + EPS)[None, :, None, None]
    return (x - mean[None, :, None, None]) * inv * w + b


def block(p, bufs, new, name, x, stride, train):
    out = jnp.maximum(batch_norm(p, bufs, new, name + ".bn1", conv(x, p[name + ".conv1.weight"], stride), train), 0)
    out = batch_norm(p, bufs, new, name + ".bn2", conv(out, p[name + ".conv2.weight"], 1), train)
    if name + ".downsample.0.weight" in p:
        x = batch_norm(p, bufs, new, name + ".downsample.1", conv(x, p[name + ".downsample.0.weight"], stride), train)
    return jnp.maximum(out + x, 0)


def forward(p, bufs, x, train):
    """Logits and the updated running statistics (bufs when not training)."""
    new = dict(bufs)
    x = jnp.maximum(batch_norm(p, bufs, new, "bn1", conv(x, p["conv1.weight"], 1), train), 0)
    for i in range(1, 5):
        x = block(p, bufs, new, f"layer{i}.0", x, 1 if i == 1 else 2, train)
        x = block(p, bufs, new, f"layer{i}.1", x, 1, train)
    x = jnp.mean(x, axis=(2, 3))
    return x @ p["fc.weight"].T + p["fc.bias"], new
