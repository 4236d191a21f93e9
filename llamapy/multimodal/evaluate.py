"""Evaluating a ``ChunkedPrompt`` (chunks.py) into a ``Llama``'s context: text runs with the
ordinary token path (``Llama._eval``), image chunks as embedding rows.

An image chunk's rows get its placeholder ids in ``input_ids``, so prefix matching finds it
next time. Non-causal chunks (Gemma 3) are decoded in one batch with ``causal=False``; M-RoPE
chunks (qwen2vl) get (4, n) positions and move the position on by ``n_pos`` only, which
``Llama._pos_shifts`` records so the text after them is placed right; they need a language
model with M-RoPE positions (``Model.n_pos_per_embd`` 4).
"""
from __future__ import annotations

import time
from typing import Any, Dict

import numpy as np

from .chunks import ChunkedPrompt, ImageChunk

__all__ = ["eval_chunked", "eval_image"]


def eval_chunked(llama: Any, prompt: ChunkedPrompt, offset: int) -> None:
    """Evaluate ``prompt`` from id ``offset`` on (a chunk boundary or inside text) after
    the rows already evaluated: text runs as tokens, image chunks as embeddings."""
    pieces = prompt.pieces_from(offset)
    total = llama.n_tokens + sum(c.n_tokens for _, c in pieces)
    if total > llama._n_ctx:
        raise ValueError(f"Prompt exceeds n_ctx: {total} > {llama._n_ctx}")
    for _, chunk in pieces:
        if isinstance(chunk, ImageChunk):
            eval_image(llama, chunk)
        else:
            llama._eval(chunk.tokens, all_logits=llama._logits_all)


def eval_image(llama: Any, chunk: ImageChunk) -> None:
    """Decode one image chunk's embeddings at the next rows (placeholder ids in input_ids).

    Non-causal chunks (Gemma 3) are decoded in one batch with ``causal=False``; M-RoPE
    chunks (qwen2vl) get (4, n) positions and advance the position by ``n_pos`` only."""
    ctx = llama._require_ctx()
    n = chunk.n_tokens
    if llama.n_tokens + n > llama._n_ctx:
        raise ValueError(f"Prompt exceeds n_ctx: {llama.n_tokens + n} > {llama._n_ctx}")
    extra: Dict[str, Any] = {}
    if chunk.non_causal:
        if n > llama.n_ubatch:
            raise ValueError(f"a non-causal image chunk of {n} tokens must fit one batch "
                             f"(n_ubatch={llama.n_ubatch})")
        extra["causal"] = False
    if chunk.mrope and llama._model.n_pos_per_embd != 4:
        raise ValueError(f"this image chunk needs M-RoPE positions (a qwen2vl-architecture language model); "
                         f"this model is {llama._model.arch!r}")
    embd = chunk.embd()
    if embd.shape[1] != llama.n_embd():
        raise ValueError(f"image embeddings are {embd.shape[1]} wide, but the language model's n_embd is "
                         f"{llama.n_embd()}")
    ids = np.asarray(chunk.placeholders(), dtype=np.intc)
    row0 = llama.n_tokens
    p0 = llama._pos_of_row(row0)
    pos = chunk.positions(p0)
    ctx.kv_seq_rm(0, p0, -1)
    step = n if chunk.non_causal else llama.n_batch
    for start in range(0, n, step):
        end = min(n, start + step)
        m = end - start
        want = np.zeros(m, dtype=bool)
        want[-1] = True  # one row of logits: the prompt may end with an image
        t0 = time.perf_counter()
        ctx.decode(tokens=None, embd=embd[start:end], pos=np.ascontiguousarray(pos[..., start:end]),
                   seq_ids=np.zeros(m, dtype=np.int32), logits=want, **extra)
        llama._perf.add_decode(m, time.perf_counter() - t0)
        llama.input_ids[llama.n_tokens:llama.n_tokens + m] = ids[start:end]
        llama._eval_serial += 1
        llama.n_tokens += m
        llama._last_logits_row = 0
    if chunk.n_pos != n:
        shift = (row0 - p0) + (n - chunk.n_pos)
        kept = [e for e in llama._pos_shifts if e[0] <= row0]
        llama._pos_shifts = kept + [(llama.n_tokens, shift)]
