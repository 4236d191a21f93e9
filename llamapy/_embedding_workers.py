"""Data-parallel encoding: an embedding (or rerank) call over several packed
batches of an encoder model runs the batches side by side, one single-thread
engine context per thread of ``n_threads_batch``, instead of one batch after
the other with every product split over the threads.

Why: an encoder's batches are independent (no KV cache is carried from one to
the next), and splitting each small product of a BERT-sized model over the
threads costs a barrier per operation, activations handed from core to core
and uneven shares of a few row panels. all-MiniLM-L6-v2 on 2 cores (AMD EPYC
Zen 2, 1,000 sentences, F32): 238 sentences per second with both threads on
every product, 317 with each thread on its own batches (benchmarks/LOG.md,
2026-12-08).

The results are the same bits: each input is evaluated alone within its
sequence, the throughput products give a row the same sums whatever batch or
thread count it is computed in, and each worker's context has the main
context's options but for its thread count (tests/test_embedding_workers.py).

Used when the model is an encoder, every part of it is on the CPU (a GPU runs
one batch at a time anyway), the Llama's context adds nothing of its own to
the model (no LoRA adapter, tensor callback or imatrix collection: the
workers' contexts would run without it), ``n_threads_batch`` is at least 2
and the inputs make at least two batches (a call with fewer batches than
threads is packed into smaller ones when it has enough inputs). Otherwise,
and for decoder models (whose contexts hold a KV cache each), the batches run
one by one on the Llama's own context.

Not here: packing, tokenization and the per-batch work (``_embedding.py``).
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, List, Optional, Sequence

from . import _engine

log = logging.getLogger("llamapy")


def parallel_workers(llama: Any, ctx: Any) -> int:
    """How many single-thread contexts an embedding call of ``llama`` may spread its batches
    over (0: run them on ``ctx`` one by one)."""
    n = int(llama.n_threads_batch)
    if n < 2 or not bool(llama.model.is_encoder):
        return 0
    if any(part["device"] != "cpu" for part in ctx.placement()):
        return 0
    if ctx.hooks:  # LoRA adapters, a tensor callback, imatrix sums: the workers would not have them
        return 0
    return n


class EncoderWorkers:
    """``n`` single-thread contexts on the Llama's model, with its context's options."""

    def __init__(self, model: Any, params: Any, n: int) -> None:
        self.n = n
        self.contexts = [_engine.Context(model, params, n_threads=1, n_threads_batch=1) for _ in range(n)]

    def run(self, batches: Sequence[Any], step: Callable[[Any, Any], Any]) -> List[Any]:
        """``step(context, batch)`` for every batch, the workers taking the next batch as they
        finish one; the results in the batches' order. The first error (in batch order) is
        raised once every worker has stopped; the contexts are left empty."""
        results: List[Any] = [None] * len(batches)
        errors: List[Optional[BaseException]] = [None] * len(batches)
        next_batch = [0]
        lock = threading.Lock()

        def work(ctx: Any) -> None:
            try:
                while True:
                    with lock:
                        i = next_batch[0]
                        if i >= len(batches) or any(e is not None for e in errors):
                            return
                        next_batch[0] += 1
                    try:
                        results[i] = step(ctx, batches[i])
                    except BaseException as e:  # noqa: BLE001 — handed to the caller below
                        errors[i] = e
                        return
            finally:
                ctx.kv_clear()

        threads = [threading.Thread(target=work, args=(c,), name=f"llamapy-encode-{k}", daemon=True)
                   for k, c in enumerate(self.contexts[:len(batches)])]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for e in errors:
            if e is not None:
                raise e
        return results


def workers_for(llama: Any, ctx: Any, n: int, n_batches: int) -> Optional[EncoderWorkers]:
    """The Llama's ``n`` encoder workers (``parallel_workers``; made on first use, kept with the
    Llama) when a call of ``n_batches`` batches should run on them, else None."""
    if n < 2 or n_batches < 2:
        return None
    workers = llama.__dict__.get("_encoder_workers")
    if workers is None or workers.n != n:
        try:
            workers = EncoderWorkers(llama.model, ctx.params, n)
        except MemoryError:
            # The Llama's own context still runs the call, one batch after the other.
            log.warning("embeddings: no memory for %d encoder contexts; the batches run one by one", n)
            return None
        llama.__dict__["_encoder_workers"] = workers
        log.debug("embeddings: %d single-thread encoder contexts, batches run side by side", n)
    return workers
