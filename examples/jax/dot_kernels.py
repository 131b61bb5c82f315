"""The products of `runtime/examples/dot_kernels.rs` in JAX, on one CPU device: each product
chained CHAIN times per execution through its sum, median of RUNS executions after WARMUP,
one JSON line per product with the same fields.

    python dot_kernels.py [TOKENS] [SEQ]

TOKENS: tokens per device in the projections (default 128); SEQ: the per-head products'
sequence length (default 64), their batch TOKENS / SEQ sequences times 8 heads.
"""

import json
import sys
import time

import jax
import jax.numpy as jnp
from jax import lax

CHAIN, RUNS, WARMUP = 10, 15, 5


def cases(tokens, seq):
    d, f, hd = 256, 896, 32
    bh = max(tokens // seq, 1) * 8
    plain = lambda l, r: (((l,), (r,)), ((), ()))
    batched = lambda l, r: (((l,), (r,)), ((0,), (0,)))
    return [
        ("x·W (forward)", (tokens, d), (d, f), plain(1, 0)),
        ("g·Wᵀ (input gradient)", (tokens, f), (d, f), plain(1, 1)),
        ("xᵀ·g (weight gradient)", (tokens, d), (tokens, f), plain(0, 0)),
        ("q·kᵀ per head", (bh, seq, hd), (bh, seq, hd), batched(2, 2)),
        ("p·v per head", (bh, seq, seq), (bh, seq, hd), batched(2, 1)),
    ]


def flops(lhs, rhs, dims):
    (_, rc), (_, rb) = dims
    free = 1
    for i, n in enumerate(rhs):
        if i not in rc and i not in rb:
            free *= n
    size = 1
    for n in lhs:
        size *= n
    return 2.0 * size * free


def main():
    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 128
    seq = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    for name, lhs, rhs, dims in cases(tokens, seq):

        def chain(x, w, dims=dims):
            sums = []
            for _ in range(CHAIN):
                total = jnp.sum(lax.dot_general(x, w, dims))
                x = x + total * 0.0
                sums.append(total)
            return sums

        run = jax.jit(chain)
        x = jnp.full(lhs, 0.01, jnp.float32)
        w = jnp.full(rhs, 0.02, jnp.float32)
        times = []
        for i in range(WARMUP + RUNS):
            started = time.perf_counter()
            jax.block_until_ready(run(x, w))
            if i >= WARMUP:
                times.append(time.perf_counter() - started)
        times.sort()
        seconds = times[RUNS // 2] / CHAIN
        print(json.dumps({
            "framework": f"jax {jax.__version__}",
            "product": name,
            "lhs": list(lhs),
            "rhs": list(rhs),
            "lhs_contract": list(dims[0][0]),
            "rhs_contract": list(dims[0][1]),
            "microseconds": seconds * 1e6,
            "gflop_per_second": flops(lhs, rhs, dims) / seconds / 1e9,
        }, ensure_ascii=False))


if __name__ == "__main__":
    main()
