"""Whole-model speed of the two attention paths at a cache depth: pp512
(a 512-token batch decoded after `depth` tokens) and tg (single tokens after
`depth` tokens), flash_attn off vs on, interleaved runs, medians.

    python benchmarks/attention_paths_depth.py [--model PATH] [--depths 0,4096]
        [--threads 2] [--runs 3] [--tg 24]

Default model: Gemma 3 270M (llamapy.default_model). A quick local check; the
depth benchmarks proper live with the other benchmark scripts.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from llamapy import _engine as E


def one_run(model, flash, depth, threads, n_tg, rng):
    ctx = E.Context(model, n_ctx=depth + 512 + n_tg + 8, n_batch=512, n_ubatch=512, n_threads=threads,
                    n_threads_batch=threads, flash_attn=flash)
    toks = rng.integers(100, 20000, depth + 512 + n_tg + 1).tolist()
    for p in range(0, depth, 512):
        n = min(512, depth - p)
        ctx.decode(tokens=toks[p:p + n], pos=list(range(p, p + n)), seq_ids=[0] * n)
    t0 = time.perf_counter()
    ctx.decode(tokens=toks[depth:depth + 512], pos=list(range(depth, depth + 512)), seq_ids=[0] * 512)
    pp = 512 / (time.perf_counter() - t0)
    ctx.kv_seq_rm(0, depth, -1)
    ctx.decode(tokens=[toks[depth]], pos=[depth], seq_ids=[0])
    t0 = time.perf_counter()
    for i in range(1, n_tg + 1):
        ctx.decode(tokens=[toks[depth + i]], pos=[depth + i], seq_ids=[0])
    return pp, n_tg / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--depths", default="0,4096")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tg", type=int, default=24)
    a = ap.parse_args()
    if a.model is None:
        from llamapy.default_model import default_model_path

        a.model = default_model_path()
    model = E.Model(a.model)
    rng = np.random.default_rng(0)
    print(f"{model.arch}, {a.threads} threads, ISA {E.system_info()['active_isa']}")
    print(f"{'depth':>6} {'path':>9} {'pp512 t/s':>10} {'tg t/s':>8}")
    for depth in [int(x) for x in a.depths.split(",")]:
        res = {False: [], True: []}
        for _ in range(a.runs):
            for flash in (False, True):
                res[flash].append(one_run(model, flash, depth, a.threads, a.tg, rng))
        for flash in (False, True):
            pp, tg = np.median(np.array(res[flash]), axis=0)
            print(f"{depth:>6} {'flash' if flash else 'explicit':>9} {pp:>10.1f} {tg:>8.1f}")


if __name__ == "__main__":
    main()
