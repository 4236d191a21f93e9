"""Attention op timings, explicit softmax path vs flash path, on one layer's
cache: token generation (1 query row) and prompt processing (a block of
rows, causal, at a depth) at several cache depths.

    python benchmarks/attention_kernels.py [--threads 2] [--depths 512,4096,16384]
        [--heads 4 --kv-heads 1 --head-dim 256]   (Gemma 3 270M's attention shape)
        [--type f16] [--pp 512] [--reps 5]

Prints the median time per call and the ratio. The op is _engine.ops.attention
(mask building happens once per measurement, outside the repeated calls).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from llamapy import _engine as E


def rows(x, t):
    return np.ascontiguousarray(np.asarray(E.quantize(x, t)).view(np.uint8).reshape(len(x), -1))


def measure(q, k, v, t, n_kv_heads, vis, path, threads, reps):
    E.ops.attention(q, k, v, t, t, n_kv_heads, vis, path=path, n_threads=threads)  # warm up
    n_inner = max(1, int(2e8 // max(1, vis.sum() * q.shape[1] * q.shape[2])))  # ~0.1 s of work per sample
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        E.ops.attention(q, k, v, t, t, n_kv_heads, vis, path=path, n_threads=threads, n_repeat=n_inner)
        times.append((time.perf_counter() - t0) / n_inner)
    return float(np.median(times))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--depths", default="512,4096,16384")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--head-dim", type=int, default=256)
    ap.add_argument("--type", default="f16")
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    d, H, KV = a.head_dim, a.heads, a.kv_heads
    print(f"heads {H}/{KV}, head_dim {d}, cache {a.type}, {a.threads} threads, "
          f"ISA {E.system_info()['active_isa']}")
    print(f"{'case':>14} {'depth':>6} {'explicit ms':>12} {'flash ms':>10} {'speedup':>8}")
    for depth in [int(x) for x in a.depths.split(",")]:
        for name, n_tok in (("tg", 1), (f"pp{a.pp}", a.pp)):
            n_cells = depth + n_tok
            k = rows(rng.standard_normal((n_cells, KV * d)).astype(np.float32), a.type)
            v = rows(rng.standard_normal((n_cells, KV * d)).astype(np.float32), a.type)
            q = (rng.standard_normal((n_tok, H, d)) / np.sqrt(d)).astype(np.float32)
            vis = np.arange(n_cells)[None, :] <= (depth + np.arange(n_tok))[:, None]
            t_e = measure(q, k, v, a.type, KV, vis, "explicit", a.threads, a.reps)
            t_f = measure(q, k, v, a.type, KV, vis, "flash", a.threads, a.reps)
            print(f"{name:>14} {depth:>6} {t_e * 1e3:>12.3f} {t_f * 1e3:>10.3f} {t_e / t_f:>7.2f}x")


if __name__ == "__main__":
    main()
