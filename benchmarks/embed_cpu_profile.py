"""Llama.embed on all-MiniLM-L6-v2 in CPU seconds of one thread: the number to
A/B an encoder change on a shared machine (issue 36), and the script to run
under ``perf record -e cpu-clock`` to see where the time goes.

Prints CPU seconds per 1,000 sentences (time.process_time around one embed
call after a 50-sentence warm-up; tokenization timed apart), GFLOP per CPU
second (benchmarks/embeddings.py's count of the work) and its fraction of the
one-thread F32 FMA peak, the engine's probe rescaled from its wall time to the
CPU time it took (on a loaded machine its wall-time rate is too low).

    python benchmarks/embed_cpu_profile.py --outtype f32 --reps 2
    LLAMAPY_ISA=avx2 python benchmarks/embed_cpu_profile.py
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import embeddings as B  # noqa: E402  (the sentences, the model's conversion, the work count)


def peak_per_cpu_second() -> float:
    """One thread's F32 FMA peak in GFLOP per CPU second: the probe's work
    (3 runs of 12 FMA chains x 20M iterations of one vector, probes.cpp) over
    the CPU time it took."""
    from llamapy import _engine

    lanes = {"avx512": 16, "avx2": 8}.get(_engine.type_info("F32")["kernel_isa"], 1)
    c0 = time.process_time()
    _engine.peak_gflops("f32_fma", 1)
    return 3 * 12 * lanes * 2 * 20e6 / (time.process_time() - c0) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--outtype", default="f32", choices=["f32", "f16", "q8_0"])
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--n-batch", type=int, default=512)
    args = ap.parse_args()
    B.use_llamapy_under_test()
    from llamapy import Llama

    path = B.gguf_model(args.outtype)
    llm = Llama(path, embedding=True, n_threads=1, n_threads_batch=1, n_batch=args.n_batch,
                n_ubatch=args.n_batch, verbose=False)
    texts = B.sentences(args.sentences)
    llm.embed(texts[:50])
    c0 = time.process_time()
    for t in texts:
        llm.tokenize(t.encode("utf-8"))
    tok = time.process_time() - c0
    c0 = time.process_time()
    for _ in range(args.reps):
        llm.embed(texts)
    cpu = (time.process_time() - c0) / args.reps * 1000 / args.sentences
    gflop = B.work_gflop(path, texts) * 1000 / args.sentences
    peak = peak_per_cpu_second()
    print(f"{args.outtype}: {cpu:.3f} CPU-s per 1,000 sentences (tokenize {tok:.3f} s), {gflop / cpu:.1f} "
          f"GFLOP/CPU-s = {100 * gflop / cpu / peak:.0f} % of the one-thread F32 FMA peak ({peak:.0f} GFLOP/CPU-s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
