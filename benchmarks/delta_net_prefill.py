"""The gated delta rule's two CPU forms on one delta-net layer's heads (Qwen3.5-4B's shape by
default: 16 key heads, 32 value heads of 128, benchmarks/synthetic_hybrid_models.py):
the step form (per row, two passes over each head's state) against the chunked form
(cpu/delta_chunked.cpp: matrix products per chunk of rows), for a prompt of one sequence.

    python benchmarks/delta_net_prefill.py [--prompt 512] [--chunks 16,32,64,128]
        [--runs 8,16,32,64] [--run-chunk 32] [--reps 3]

Measured in CPU seconds of this process (time.process_time), one thread, since the
machine may be shared: the best of --reps calls. The op is
_engine.backend_gated_delta(..., kernel="step" | "chunked", chunk=C), which runs the CPU
kernels directly on the calling thread. --runs: short prompts, for where the chunked form
starts to pay (delta_net.h gated_delta_plan.min_run).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from llamapy import _engine as E


def inputs(n, Hk, Hv, S, seed=0):
    rng = np.random.default_rng(seed)

    def l2(a):
        a = a.reshape(n, -1, S)
        return (a / np.linalg.norm(a, axis=2, keepdims=True)).reshape(n, -1).astype(np.float32)

    q, k = l2(rng.standard_normal((n, Hk * S))), l2(rng.standard_normal((n, Hk * S)))
    v = rng.standard_normal((n, Hv * S)).astype(np.float32)
    g = -rng.uniform(0.01, 1.0, (n, Hv)).astype(np.float32)
    beta = rng.uniform(0.0, 1.0, (n, Hv)).astype(np.float32)
    state = (0.3 * rng.standard_normal((1, Hv, S, S))).astype(np.float32)
    return q, k, v, g, beta, state, np.zeros(n, dtype=np.int32), Hk


def cpu_seconds(args, reps, **kw):
    best = float("inf")
    for _ in range(reps):
        t0 = time.process_time()
        E.backend_gated_delta("cpu", *args, **kw)
        best = min(best, time.process_time() - t0)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--key-heads", type=int, default=16)
    ap.add_argument("--value-heads", type=int, default=32)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--chunks", default="16,32,64,128")
    ap.add_argument("--runs", default="8,16,32,64")
    ap.add_argument("--run-chunk", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    print(f"level {E.system_info()['active_isa']}; {a.key_heads} key / {a.value_heads} value heads "
          f"of {a.head_dim}; CPU seconds, one thread")
    args = inputs(a.prompt, a.key_heads, a.value_heads, a.head_dim)
    step = cpu_seconds(args, a.reps, kernel="step")
    print(f"prompt {a.prompt}: step {step:.4f} s")
    for c in (int(x) for x in a.chunks.split(",")):
        t = cpu_seconds(args, a.reps, kernel="chunked", chunk=c)
        print(f"prompt {a.prompt}: chunked C={c} {t:.4f} s  ({step / t:.2f}x the step form)")
    for n in (int(x) for x in a.runs.split(",")):
        args = inputs(n, a.key_heads, a.value_heads, a.head_dim, seed=n)
        s = cpu_seconds(args, a.reps * 3, kernel="step")
        c = cpu_seconds(args, a.reps * 3, kernel="chunked", chunk=a.run_chunk)
        print(f"run of {n}: step {s * 1e3:.2f} ms, chunked (C={a.run_chunk}) {c * 1e3:.2f} ms  ({s / c:.2f}x)")


if __name__ == "__main__":
    main()
