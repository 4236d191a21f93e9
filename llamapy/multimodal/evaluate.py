"""Evaluating a ``ChunkedPrompt`` (chunks.py) into a ``Llama``'s context: text runs with the
ordinary token path (``Sequence.eval``, llamapy/_sequence.py), image chunks as embedding rows.

An image chunk's rows get its placeholder ids in ``input_ids``, so prefix matching finds it
next time. Non-causal chunks (Gemma 3) are decoded in one batch with ``causal=False``; M-RoPE
chunks (qwen2vl) get (4, n) positions and move the position on by ``n_pos`` only, which
the sequence's position shifts record so the text after them is placed right; they need a language
model with M-RoPE positions (``Model.n_pos_per_embd`` 4).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .chunks import ChunkedPrompt, ImageChunk

__all__ = ["eval_chunked", "eval_image"]


def eval_chunked(llama: Any, prompt: ChunkedPrompt, offset: int) -> None:
    """Evaluate ``prompt`` from id ``offset`` on (a chunk boundary or inside text) after
    the rows already evaluated in ``llama.sequence``: text runs as tokens, image chunks
    as embeddings."""
    seq = llama.sequence
    pieces = prompt.pieces_from(offset)
    total = seq.n_tokens + sum(c.n_tokens for _, c in pieces)
    if total > seq.n_ctx:
        raise ValueError(f"Prompt exceeds n_ctx: {total} > {seq.n_ctx}")
    for _, chunk in pieces:
        if isinstance(chunk, ImageChunk):
            eval_image(llama, chunk)
        else:
            seq.eval(chunk.tokens, all_logits=llama._logits_all)


def eval_image(llama: Any, chunk: ImageChunk) -> None:
    """Decode one image chunk's embeddings at the next rows of ``llama.sequence``
    (placeholder ids in its tokens).

    Non-causal chunks (Gemma 3) are decoded in one batch with ``causal=False``; M-RoPE
    chunks (qwen2vl) get (4, n) positions and advance the position by ``n_pos`` only."""
    seq = llama.sequence
    seq.ensure_usable()
    n = chunk.n_tokens
    if seq.n_tokens + n > seq.n_ctx:
        raise ValueError(f"Prompt exceeds n_ctx: {seq.n_tokens + n} > {seq.n_ctx}")
    if chunk.non_causal and n > llama.n_ubatch:
        raise ValueError(f"a non-causal image chunk of {n} tokens must fit one batch "
                         f"(n_ubatch={llama.n_ubatch})")
    if chunk.mrope and llama.model.n_pos_per_embd != 4:
        raise ValueError(f"this image chunk needs M-RoPE positions (a qwen2vl-architecture language model); "
                         f"this model is {llama.model.arch!r}")
    embd = chunk.embd()
    if embd.shape[1] != llama.n_embd():
        raise ValueError(f"image embeddings are {embd.shape[1]} wide, but the language model's n_embd is "
                         f"{llama.n_embd()}")
    ids = np.asarray(chunk.placeholders(), dtype=np.intc)
    pos = chunk.positions(seq.pos_of_row(seq.n_tokens))
    step = n if chunk.non_causal else llama.n_batch
    seq.eval_embd(embd, pos, ids, chunk.n_pos, step, causal=not chunk.non_causal)
