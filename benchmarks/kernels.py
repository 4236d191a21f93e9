"""Kernel benchmark: quantized mat-vec and mat-mat against the machine's limits.

Mat-vec (token generation) is memory bound, so it is reported as GB/s of
weight bytes read and as a fraction of the memory read bandwidth measured in
the same run. The weights cycle through the layers of a Llama-3.2-1B-shaped
model (hidden 2048, FFN 8192, 8 KV heads) until at least --min-mb of distinct
matrices are touched, more than the last-level cache, so nothing stays in it
(the default 300 MB is ~10x the Zen machines' 32 MB L3; the Intel Xeon VM
reports 480 MB of L3 and read 100 MB of weights at 1.2-1.5x its memory
bandwidth: take --min-mb 1200 there).
--shapes picks other matrices for mat-vec: "head", Qwen3-30B-A3B's output
head (151936 x 2048, the Q6_K matrix of its Q4_K_M file, ~40% of the bytes
a token reads), or "experts", its experts' down projections (2048 x 768,
one product per expert, as the mixture's decode reads them).

--pages: the memory pages the mat-vec weights sit in. "4k": ordinary pages,
as the engine's weights have them (read into anonymous memory without
MADV_HUGEPAGE, or mapped from the page cache); "huge": one buffer numpy
advises for transparent huge pages; "numpy" (the default, as before this
option): one array per matrix, so numpy's own rule applies (huge pages from
4 MiB on: the 1B shape's FFN matrices and a head, not its attention
matrices). On the Intel Xeon VM the same kernel read Qwen3's head at 1.5x
the speed from huge pages (benchmarks/LOG.md, 2026-12-07): the TLB misses
of 4 KiB pages are dear there, so say which pages a number was taken on.

Mat-mat (prompt processing, batch 512) is compute bound: GFLOP/s and the
fraction of the measured peak (int8 dot products for quantized types, f32 FMA
for float types).

    python benchmarks/kernels.py                 # all types, 1 and 2 threads
    python benchmarks/kernels.py --types Q4_K Q8_0 --threads 2 --json out.json
    python benchmarks/kernels.py --types Q8_0 Q6_K --threads 2 --small 2,3,4,8
    python benchmarks/kernels.py --types Q6_K --threads 2 --no-matmat --shapes layers head experts

--small N,...: small batches (a few server slots decoding together, a short
speculative draft): the same memory-resident weights multiplied by N
activation rows, reported as the time per call relative to mat-vec (1.00x:
N rows for the price of one pass over the weights; N.00x: no sharing).

Weights are random but well-formed: a small matrix quantized with llamapy and
tiled to size (speed does not depend on the values).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
import time

import numpy as np

from llamapy import _engine

ALL_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
             "IQ4_NL", "IQ4_XS", "MXFP4"]
HIDDEN, FFN, KV = 2048, 8192, 512
# (n_rows, n_cols) of the matrices one pass of mat-vec multiplies, repeated
# with distinct copies until --min-mb are touched
SHAPES = {
    # one layer of the 1B shape: q, k, v, o, gate, up, down
    "layers": [(HIDDEN, HIDDEN), (KV, HIDDEN), (KV, HIDDEN), (HIDDEN, HIDDEN), (FFN, HIDDEN), (FFN, HIDDEN),
               (HIDDEN, FFN)],
    "head": [(151936, 2048)],   # Qwen3-30B-A3B's output head
    "experts": [(2048, 768)],   # one of its experts' down projections
}
LAYER = SHAPES["layers"]


def make_matrix(type_name: str, n_rows: int, n_cols: int, seed: int) -> np.ndarray:
    """Random well-formed quantized rows, tiled from a 64-row seed matrix."""
    rng = np.random.default_rng(seed)
    base_rows = min(64, n_rows)
    base = _engine.quantize(rng.standard_normal((base_rows, n_cols)).astype(np.float32) * 0.02, type_name)
    reps = -(-n_rows // base_rows)
    return np.ascontiguousarray(np.tile(base, (reps, 1))[:n_rows])


def set_huge_page_advice(on: bool) -> None:
    """numpy's madvise(MADV_HUGEPAGE) for its large allocations, on or off."""
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray
    multiarray._set_madvise_hugepage(on)


def model_weights(type_name: str, min_mb: float, shapes: list = LAYER, pages: str = "numpy") -> list:
    bytes_per_layer = sum(r * _engine.row_size(type_name, c) for r, c in shapes)
    n_layers = max(1, int(np.ceil(min_mb * 1e6 / bytes_per_layer)))
    # Distinct copies per layer, so every matrix really lives in memory.
    base = [make_matrix(type_name, r, c, i) for i, (r, c) in enumerate(shapes)]
    if pages == "numpy":  # one array each
        return [(m.copy(), type_name, r, c) for _ in range(n_layers) for (r, c), m in zip(shapes, base)]
    # one buffer, its pages as asked
    set_huge_page_advice(pages == "huge")
    try:
        buf = np.empty(n_layers * bytes_per_layer, np.uint8)
    finally:
        set_huge_page_advice(True)  # numpy's default
    mats, off = [], 0
    for _ in range(n_layers):
        for (r, c), m in zip(shapes, base):
            view = buf[off:off + m.nbytes].reshape(m.shape)
            view[...] = m
            mats.append((view, type_name, r, c))
            off += m.nbytes
    return mats


def bench_matvec(mats: list, n_threads: int, n_iters: int) -> float:
    nbytes = sum(m[0].nbytes for m in mats)
    _engine.bench_matmul(mats, 1, n_threads, 2)  # warm-up: page faults, pool start
    times = _engine.bench_matmul(mats, 1, n_threads, n_iters)
    return nbytes / statistics.median(times) / 1e9


def bench_matmat(type_name: str, n_threads: int, batch: int, n_iters: int) -> float:
    shapes = [(HIDDEN, HIDDEN), (FFN, HIDDEN)]
    mats = [(make_matrix(type_name, r, c, 100 + i), type_name, r, c) for i, (r, c) in enumerate(shapes)]
    flops = sum(2.0 * r * c * batch for r, c in shapes)
    _engine.bench_matmul(mats, batch, n_threads, 1)
    times = _engine.bench_matmul(mats, batch, n_threads, n_iters)
    return flops / statistics.median(times) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", nargs="*", default=ALL_TYPES)
    ap.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    ap.add_argument("--min-mb", type=float, default=300.0, help="distinct weight bytes cycled in mat-vec")
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--no-matmat", action="store_true")
    ap.add_argument("--small", default="", help="also time these small batch sizes against mat-vec, e.g. 2,3,4,8")
    ap.add_argument("--shapes", nargs="*", default=["layers"], choices=list(SHAPES),
                    help="the matrices of mat-vec (module docstring); mat-mat always takes the 1B layer shapes")
    ap.add_argument("--pages", default="numpy", choices=["numpy", "4k", "huge"],
                    help="memory pages of the mat-vec weights (module docstring)")
    ap.add_argument("--json", help="write the results here as JSON")
    args = ap.parse_args()

    info = _engine.system_info()
    print(f"llamapy {info['version']} ({info['build']} build, kernels: {info['active_isa']}), "
          f"{platform.processor() or platform.machine()}, {info['n_physical_cores']} cores, "
          f"{dt.datetime.now().isoformat(timespec='minutes')}")
    bw = {t: _engine.read_bandwidth(1 << 30, 7, t) for t in args.threads}
    peak_f = {t: _engine.peak_gflops("f32_fma", t) for t in args.threads}
    peak_i = {t: _engine.peak_gflops("i8_dot", t) for t in args.threads} if info["active_isa"] != "scalar" else {}
    for t in args.threads:
        print(f"threads={t}: read bandwidth {bw[t]:.1f} GB/s, peak f32 FMA {peak_f[t]:.0f} GFLOP/s"
              + (f", peak int8 dot {peak_i[t]:.0f} GOP/s" if peak_i else ""))

    results = []
    hdr = f"{'type':7} {'shape':7} {'thr':>3} {'matvec GB/s':>11} {'% of bw':>8}"
    if not args.no_matmat:
        hdr += f" {'matmat GFLOP/s':>14} {'% of peak':>9}"
    print(hdr)
    for type_name in args.types:
        ti = _engine.type_info(type_name)
        if not ti["has_matmul"]:
            print(f"{type_name:7} (no kernels)")
            continue
        for shape in args.shapes:
            mats = model_weights(type_name, args.min_mb, SHAPES[shape], args.pages)
            for t in args.threads:
                # Re-measure bandwidth next to each type: it drifts on shared machines.
                bw_now = _engine.read_bandwidth(1 << 29, 5, t)
                gbs = bench_matvec(mats, t, args.iters)
                row = {"type": type_name, "shape": shape, "pages": args.pages, "threads": t, "matvec_gbs": gbs,
                       "bandwidth_gbs": bw_now,
                       "matvec_frac": gbs / bw_now, "weights_mb": sum(m[0].nbytes for m in mats) / 1e6}
                line = f"{type_name:7} {shape:7} {t:3d} {gbs:11.1f} {100 * gbs / bw_now:7.0f}%"
                if args.small:
                    t1 = statistics.median(_engine.bench_matmul(mats, 1, t, args.iters))
                    rel = {}
                    for nb in (int(x) for x in args.small.split(",") if x):
                        _engine.bench_matmul(mats, nb, t, 1)
                        rel[nb] = statistics.median(_engine.bench_matmul(mats, nb, t, args.iters)) / t1
                    row["small_batch_vs_matvec"] = rel
                    line += " small: " + " ".join(f"{nb}:{v:.2f}x" for nb, v in rel.items())
                if not args.no_matmat and shape == args.shapes[0]:
                    gf = bench_matmat(type_name, t, args.batch, max(2, args.iters // 2))
                    peak = peak_i.get(t) if ti["is_quantized"] and peak_i else peak_f[t]
                    row.update({"matmat_gflops": gf, "peak_gflops": peak, "matmat_frac": gf / peak})
                    line += f" {gf:14.1f} {100 * gf / peak:8.1f}%"
                print(line, flush=True)
                results.append(row)
            del mats
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"system": info, "bandwidth": bw, "peak_f32": peak_f, "peak_i8": peak_i,
                       "date": dt.datetime.now().isoformat(), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
