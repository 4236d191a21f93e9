"""``python -m llamapy bench``: prompt-processing and generation speed of a
model, measured like llama-bench (pp: one batch of n_prompt tokens; tg:
n_gen single-token steps), reported as tokens per second (mean ± stdev).
"""
from __future__ import annotations

import json
import os
import statistics
import time
from typing import Dict, List

import numpy as np


def run_bench(model_path: str, n_prompt: int = 512, n_gen: int = 128, threads: int = 0, repetitions: int = 3,
              batch_size: int = 512, as_json: bool = False) -> int:
    from .llama import Llama

    n_ctx = max(n_prompt, n_gen) + 16
    llm = Llama(model_path=model_path, n_ctx=n_ctx, n_batch=max(batch_size, 1), n_ubatch=max(batch_size, 1),
                n_threads=threads or None, n_threads_batch=threads or None, verbose=False)
    rng = np.random.default_rng(0)
    # Random ids from the lower vocabulary (ordinary text tokens), as llama-bench does.
    vocab_hi = max(2, min(llm.n_vocab(), 32000))
    results: List[Dict[str, object]] = []

    def timed(fn) -> List[float]:
        fn()  # warm-up
        out = []
        for _ in range(max(1, repetitions)):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return out

    if n_prompt > 0:
        prompt = rng.integers(1, vocab_hi, size=n_prompt).tolist()

        def pp() -> None:
            llm.reset()
            llm.eval(prompt)

        times = timed(pp)
        rates = [n_prompt / t for t in times]
        results.append({"test": f"pp{n_prompt}", "tokens_per_s": statistics.mean(rates),
                        "stdev": statistics.pstdev(rates)})
    if n_gen > 0:
        gen = rng.integers(1, vocab_hi, size=n_gen).tolist()

        def tg() -> None:
            llm.reset()
            llm.eval(gen[:1])
            for t in gen[1:]:
                llm.eval([t])

        times = timed(tg)
        rates = [n_gen / t for t in times]
        results.append({"test": f"tg{n_gen}", "tokens_per_s": statistics.mean(rates),
                        "stdev": statistics.pstdev(rates)})

    meta = {"model": os.path.basename(model_path), "arch": llm.model.arch,
            "size_mib": os.path.getsize(model_path) / 2**20, "threads": llm.n_threads}
    llm.close()
    if as_json:
        print(json.dumps({**meta, "results": results}, indent=2))
        return 0
    print(f"| model | size | threads | test | t/s |")
    print(f"| --- | ---: | ---: | ---: | ---: |")
    for r in results:
        print(f"| {meta['model']} ({meta['arch']}) | {meta['size_mib']:.1f} MiB | {meta['threads']} | "
              f"{r['test']} | {r['tokens_per_s']:.2f} ± {r['stdev']:.2f} |")
    return 0
