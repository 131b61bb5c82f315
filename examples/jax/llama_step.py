"""The tiny Llama's FSDP training step in JAX, timed the way `stackscan bench` times its own.

The same model as stackscan's `llama` preset (vocab 512, d 256, 8 query heads and 2 key/value
heads of 32, SwiGLU MLP of 896, RMSNorm eps 1e-5, RoPE base 500000, untied head), resized by
--layers/--seq/--batch, on --devices virtual CPU devices, written the way JAX runs it fastest
on this machine: `shard_map` over one `fsdp` axis, the layers stacked and run by `lax.scan`,
each layer's weights all-gathered inside the scanned body (their gradients reduce-scattered by
the gather's transpose), `jax.checkpoint` per layer, and Adam (betas 0.9/0.95, eps 1e-8,
lr 1e-3) applied to the local shards with the state donated.

Two other forms, for the question "is this JAX's fastest form": `--remat dots` (per-layer
checkpoint that saves the products' outputs) and `--remat none` (no checkpoint), and `--fused`
(the same weights, but the shards of W_q | W_k | W_v and of W_gate | W_up are concatenated
before their gather, so each group is one all-gather, one product and one reduce-scatter).

Prints one JSON object: the median and fastest of --steps timed steps after --warmup, the
compiled temp memory per device and the compile time. Run by `compare.sh`; not part of CI.
"""

import argparse
import json
import os
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=8, help="sequences over all devices")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--remat",
        choices=["full", "dots", "none"],
        default="full",
        help="per-layer rematerialisation: recompute everything (full), keep the products' "
        "outputs (dots), or no checkpoint (none)",
    )
    p.add_argument(
        "--fused",
        action="store_true",
        help="gather W_q|W_k|W_v and W_gate|W_up as one concatenated weight each",
    )
    p.add_argument(
        "--export",
        metavar="PATH",
        help="also write the step's StableHLO (what JAX hands XLA) to PATH, for "
        "`runtime/examples/run_stablehlo.rs` to time through stackscan's plugin",
    )
    return p.parse_args()


ARGS = parse_args()
# Virtual CPU devices: must be set before JAX starts its backend.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + f" --xla_force_host_platform_device_count={ARGS.devices}"
)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

VOCAB, D, HEADS, KV_HEADS, HEAD_DIM, FFN = 512, 256, 8, 2, 32, 896
EPS, THETA = 1e-5, 500000.0
LR, B1, B2, ADAM_EPS = 1e-3, 0.9, 0.95, 1e-8

# Stacked layer weights: [layers, in, out], sharded on `in`; norms replicated.
LAYER_SHAPES = {
    "attn_norm": (D,),
    "wq": (D, HEADS * HEAD_DIM),
    "wk": (D, KV_HEADS * HEAD_DIM),
    "wv": (D, KV_HEADS * HEAD_DIM),
    "wo": (HEADS * HEAD_DIM, D),
    "mlp_norm": (D,),
    "w_gate": (D, FFN),
    "w_up": (D, FFN),
    "w_down": (FFN, D),
}


def spec_of(name, shape, stacked):
    """Where a weight is split: its first matrix dimension over `fsdp`, norms nowhere."""
    if len(shape) == 1:
        return P()
    return P(None, "fsdp") if stacked else P("fsdp")


def init(key, layers):
    params, specs = {"layers": {}}, {"layers": {}}
    keys = iter(jax.random.split(key, 16))
    for name, shape in LAYER_SHAPES.items():
        full = (layers, *shape)
        if len(shape) == 1:
            params["layers"][name] = jnp.ones(full, jnp.float32)
        else:
            params["layers"][name] = 0.02 * jax.random.normal(next(keys), full, jnp.float32)
        specs["layers"][name] = spec_of(name, shape, True)
    params["embed"] = jax.random.normal(next(keys), (VOCAB, D), jnp.float32)
    params["final_norm"] = jnp.ones((D,), jnp.float32)
    params["lm_head"] = 0.02 * jax.random.normal(next(keys), (D, VOCAB), jnp.float32)
    specs["embed"], specs["final_norm"], specs["lm_head"] = P("fsdp"), P(), P("fsdp")
    return params, specs


def rms_norm(x, g):
    return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS) * g


def rope(x):
    """Rotate-half RoPE over the head dimension; x is [B, S, heads, HEAD_DIM]."""
    s = x.shape[1]
    inv = THETA ** (-jnp.arange(0, HEAD_DIM, 2, dtype=jnp.float32) / HEAD_DIM)
    ang = jnp.arange(s, dtype=jnp.float32)[:, None] * inv[None, :]
    cos = jnp.concatenate([jnp.cos(ang)] * 2, -1)[None, :, None, :]
    sin = jnp.concatenate([jnp.sin(ang)] * 2, -1)[None, :, None, :]
    half = HEAD_DIM // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def gather(w):
    return lax.all_gather(w, "fsdp", axis=0, tiled=True) if w.ndim > 1 else w


def projections(x, w):
    """q, k, v ([B, S, heads, HEAD_DIM]) of the normalised stream: one product per weight, or
    (--fused) one by [W_q | W_k | W_v], split after."""
    b, s, _ = x.shape
    nq, nkv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    if ARGS.fused:
        qkv = x @ gather(jnp.concatenate([w["wq"], w["wk"], w["wv"]], axis=1))
        q, k, v = qkv[..., :nq], qkv[..., nq : nq + nkv], qkv[..., nq + nkv :]
    else:
        q, k, v = x @ gather(w["wq"]), x @ gather(w["wk"]), x @ gather(w["wv"])
    heads = lambda t, n: t.reshape(b, s, n, HEAD_DIM)  # noqa: E731
    return heads(q, HEADS), heads(k, KV_HEADS), heads(v, KV_HEADS)


def mlp(x, w):
    """The SwiGLU MLP of the normalised stream; --fused: one product by [W_gate | W_up]."""
    if ARGS.fused:
        gate_up = x @ gather(jnp.concatenate([w["w_gate"], w["w_up"]], axis=1))
        gate, up = gate_up[..., :FFN], gate_up[..., FFN:]
    else:
        gate, up = x @ gather(w["w_gate"]), x @ gather(w["w_up"])
    return (jax.nn.silu(gate) * up) @ gather(w["w_down"])


def layer(h, w):
    b, s, _ = h.shape
    x = rms_norm(h, w["attn_norm"])
    q, k, v = projections(x, w)
    q, k = rope(q), rope(k)
    k = jnp.repeat(k, HEADS // KV_HEADS, axis=2)
    v = jnp.repeat(v, HEADS // KV_HEADS, axis=2)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(HEAD_DIM).astype(jnp.float32)
    causal = jnp.tril(jnp.ones((s, s), bool))
    scores = jnp.where(causal, scores, -jnp.inf)
    attn = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
    h = h + attn.reshape(b, s, HEADS * HEAD_DIM) @ gather(w["wo"])
    return h + mlp(rms_norm(h, w["mlp_norm"]), w), None


REMAT = {
    "full": jax.checkpoint(layer),
    "dots": jax.checkpoint(
        layer, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    ),
    "none": layer,
}


def local_loss(params, tokens, labels, devices):
    """This device's share of the global mean loss (the shares add up over devices)."""
    h = gather(params["embed"])[tokens]
    h, _ = lax.scan(REMAT[ARGS.remat], h, params["layers"])
    logits = rms_norm(h, params["final_norm"]) @ gather(params["lm_head"])
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, labels[..., None], axis=-1)
    return jnp.mean(nll) / devices


def main():
    n = ARGS.devices
    if ARGS.batch % n:
        sys.exit(f"--batch {ARGS.batch} does not split over {n} devices")
    mesh = Mesh(jax.devices()[:n], ("fsdp",))
    params, specs = init(jax.random.PRNGKey(0), ARGS.layers)
    replicated = jax.tree.map(lambda s: s == P(), specs, is_leaf=lambda s: isinstance(s, P))

    def local_step(params, m, v, t, tokens, labels):
        loss, grads = jax.value_and_grad(local_loss)(params, tokens, labels, n)
        # A replicated weight's gradient is each device's part; the gathered ones arrive
        # reduce-scattered (the transpose of the gather).
        grads = jax.tree.map(
            lambda g, r: lax.psum(g, "fsdp") if r else g, grads, replicated
        )
        loss = lax.psum(loss, "fsdp")
        t = t + 1.0
        m = jax.tree.map(lambda m, g: B1 * m + (1 - B1) * g, m, grads)
        v = jax.tree.map(lambda v, g: B2 * v + (1 - B2) * g * g, v, grads)
        c1, c2 = 1 - B1**t, 1 - B2**t
        params = jax.tree.map(
            lambda w, m, v: w - LR * (m / c1) / (jnp.sqrt(v / c2) + ADAM_EPS), params, m, v
        )
        return params, m, v, t, loss

    step = jax.jit(
        jax.shard_map(
            local_step,
            mesh=mesh,
            in_specs=(specs, specs, specs, P(), P("fsdp"), P("fsdp")),
            out_specs=(specs, specs, specs, P(), P()),
        ),
        donate_argnums=(0, 1, 2),
    )
    put = lambda tree: jax.tree.map(  # noqa: E731
        lambda x, s: jax.device_put(x, NamedSharding(mesh, s)),
        tree,
        specs,
        is_leaf=lambda x: isinstance(x, jax.Array),
    )
    params = put(params)
    m = put(jax.tree.map(jnp.zeros_like, params))
    v = put(jax.tree.map(jnp.zeros_like, params))
    t = jnp.zeros((), jnp.float32)
    key = jax.random.PRNGKey(1)
    data = jax.random.randint(key, (ARGS.batch, ARGS.seq + 1), 0, VOCAB, jnp.int32)
    tokens = jax.device_put(data[:, :-1], NamedSharding(mesh, P("fsdp")))
    labels = jax.device_put(data[:, 1:], NamedSharding(mesh, P("fsdp")))

    started = time.perf_counter()
    lowered = step.lower(params, m, v, t, tokens, labels)
    if ARGS.export:
        with open(ARGS.export, "w") as f:
            f.write(lowered.as_text())
    compiled = lowered.compile()
    compile_seconds = time.perf_counter() - started
    memory = compiled.memory_analysis()
    times, losses = [], []
    for i in range(ARGS.warmup + ARGS.steps):
        started = time.perf_counter()
        params, m, v, t, loss = compiled(params, m, v, t, tokens, labels)
        loss.block_until_ready()
        if i >= ARGS.warmup:
            times.append(time.perf_counter() - started)
            losses.append(float(loss))
    times.sort()
    print(
        json.dumps(
            {
                "framework": f"jax {jax.__version__}",
                "remat": ARGS.remat,
                "fused": ARGS.fused,
                "devices": n,
                "layers": ARGS.layers,
                "batch": ARGS.batch,
                "seq": ARGS.seq,
                "step_seconds_median": times[len(times) // 2],
                "step_seconds_min": times[0],
                "temp_bytes": getattr(memory, "temp_size_in_bytes", None),
                "compile_seconds": compile_seconds,
                "loss_first": losses[0],
                "loss_last": losses[-1],
            }
        )
    )


if __name__ == "__main__":
    main()
