"""Embeddings: ``Llama.embed`` and ``Llama.create_embedding`` with
llama-cpp-python 0.3.x semantics.

Inputs are tokenized (with the model's special tokens, e.g. BERT's [CLS] ...
[SEP]), cut to ``n_batch`` tokens when ``truncate`` is set, and packed into
batches of at most ``n_batch`` tokens and ``n_seq_max`` inputs, one sequence
id per input, so a list of inputs costs a few decodes rather than one each;
an encoder's batches run side by side on single-thread contexts where there
are threads for it (``_embedding_workers.py``).
The engine pools each sequence natively (mean, first token, last token) or,
with pooling "none", keeps every token's vector. Encoders (bert, nomic-bert)
see each input whole and only within its own sequence; decoders attend
causally within each sequence.

Not here: the forward passes and pooling (the engine), tokenization
(``_tokenizer.py``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple, Union

import numpy as np

from . import _engine
from ._embedding_workers import parallel_workers, workers_for

POOLING_NONE = 0
MAX_SEQUENCES = _engine.max_sequences  # the engine's (kv_cache.h; llama.cpp's LLAMA_MAX_SEQ): sequences one decode may hold

Vector = List[float]


def _normalize(rows: np.ndarray) -> np.ndarray:
    """L2-normalise each row; all-zero rows stay as they are."""
    norms = np.linalg.norm(rows.astype(np.float64), axis=-1, keepdims=True)
    return np.where(norms == 0.0, rows, rows / np.where(norms == 0.0, 1.0, norms)).astype(np.float32)


def _pack(token_lists: Sequence[Sequence[int]], n_batch: int, n_seq_max: int) -> List[List[int]]:
    """Input indices grouped into batches of <= n_batch tokens and <= n_seq_max inputs, in order."""
    batches: List[List[int]] = []
    cur: List[int] = []
    n_tok = 0
    for i, toks in enumerate(token_lists):
        if cur and (n_tok + len(toks) > n_batch or len(cur) >= n_seq_max):
            batches.append(cur)
            cur, n_tok = [], 0
        cur.append(i)
        n_tok += len(toks)
    if cur:
        batches.append(cur)
    return batches


def _batches(llama: Any, ctx: Any, token_lists: Sequence[Sequence[int]], n: int) -> List[List[int]]:
    """The packed batches of a call. Where they will run side by side on n workers
    (_embedding_workers.py), a number of batches that is not a multiple of n is packed again
    into smaller batches (when there are inputs enough), so that fewer workers sit out the last
    round."""
    n_seq = int(ctx.n_seq_max)
    batches = _pack(token_lists, int(llama.n_batch), n_seq)
    if n >= 2 and len(batches) % n != 0 and len(token_lists) > len(batches):
        want = -(-len(batches) // n) * n
        budget = max(max(len(t) for t in token_lists), -(-sum(len(t) for t in token_lists) // want))
        batches = _pack(token_lists, budget, n_seq)
    return batches


def _batch_arrays(token_lists: Sequence[Sequence[int]], members: Sequence[int]) -> Tuple[List[int], np.ndarray,
                                                                                        np.ndarray, np.ndarray]:
    """(sizes, tokens, positions, sequence ids) of the inputs ``members`` as sequences 0..k-1."""
    sizes = [len(token_lists[i]) for i in members]
    tokens = np.concatenate([np.asarray(token_lists[i], dtype=np.int32) for i in members])
    pos = np.concatenate([np.arange(n, dtype=np.int32) for n in sizes])
    seq = np.repeat(np.arange(len(members), dtype=np.int32), sizes)
    return sizes, tokens, pos, seq


def _decode_pooled(ctx: Any, token_lists: Sequence[Sequence[int]], members: Sequence[int],
                   normalize: bool) -> np.ndarray:
    """The pooled vectors of the inputs ``members``, evaluated as one batch: (k, n_embd) float32."""
    _, tokens, pos, seq = _batch_arrays(token_lists, members)
    ctx.kv_clear()
    ctx.decode(tokens=tokens, pos=pos, seq_ids=seq, logits=np.zeros(len(tokens), dtype=bool))
    rows = ctx.get_embeddings_seqs(len(members))
    return _normalize(rows) if normalize else rows


def _decode_batch(ctx: Any, token_lists: Sequence[Sequence[int]], members: Sequence[int], pooled: bool,
                  normalize: bool) -> List[Union[Vector, List[Vector]]]:
    """Evaluate the inputs `members` as sequences 0..k-1 of one batch and
    return their embeddings (pooled vectors, or one vector per token)."""
    if pooled:
        return _decode_pooled(ctx, token_lists, members, normalize).tolist()
    sizes, tokens, pos, seq = _batch_arrays(token_lists, members)
    ctx.kv_clear()
    ctx.decode(tokens=tokens, pos=pos, seq_ids=seq, logits=np.ones(len(tokens), dtype=bool))
    rows = np.array(ctx.get_embeddings_all(), copy=True)
    if normalize:
        rows = _normalize(rows)
    out: List[Union[Vector, List[Vector]]] = []
    at = 0
    for n in sizes:
        out.append(rows[at:at + n].tolist())
        at += n
    return out


def _tokenized(llama: Any, inputs: Sequence[str], truncate: bool) -> Tuple[List[List[int]], int]:
    """Each input's tokens (cut to the limit with ``truncate``, else too long is a ValueError),
    and their total."""
    n_batch = int(llama.n_batch)
    limit = n_batch
    n_pos = int(llama.model.n_pos_embd)
    if n_pos > 0:  # learned absolute positions: inputs cannot be longer
        limit = min(limit, n_pos)
    token_lists: List[List[int]] = []
    total_tokens = 0
    for text in inputs:
        toks = llama.tokenize(text.encode("utf-8"))
        if truncate:
            toks = toks[:limit]
        total_tokens += len(toks)
        if len(toks) > n_batch:
            raise ValueError(f"Requested tokens ({len(toks)}) exceed batch size of {n_batch}")
        if len(toks) > limit:
            raise ValueError(f"Requested tokens ({len(toks)}) exceed the model's {limit} positions")
        if not toks:
            raise ValueError(f"input {len(token_lists)} has no tokens (the model adds no special tokens to "
                             "an empty text)")
        token_lists.append(toks)
    return token_lists, total_tokens


def _embedding_ctx(llama: Any, inputs: Any) -> Any:
    if not llama.context_params.embeddings:
        raise RuntimeError("Llama model must be created with embedding=True to call this method")
    if not isinstance(inputs, (list, tuple)) or not all(isinstance(s, str) for s in inputs):
        raise TypeError("input must be a str or a list of str")
    return llama._require_ctx()


def _each_batch(llama: Any, ctx: Any, token_lists: Sequence[Sequence[int]], step: Any) -> List[Any]:
    """``step(context, members)`` for each packed batch of inputs, in order, under the Llama's
    lock: on the Llama's context, or side by side on its encoder workers
    (_embedding_workers.py); the contexts are left empty."""
    with llama._lock:
        try:
            n = parallel_workers(llama, ctx)
            batches = _batches(llama, ctx, token_lists, n)
            workers = workers_for(llama, ctx, n, len(batches))
            if workers is not None:
                return workers.run(batches, step)
            return [step(ctx, members) for members in batches]
        finally:
            ctx.kv_clear()
            llama.reset()


def embed_array(llama: Any, inputs: Sequence[str], normalize: bool = False, truncate: bool = True) -> np.ndarray:
    """The pooled embeddings of ``inputs`` as one (len(inputs), n_embd) float32 array: the
    numbers ``embed`` returns as lists, without a Python float per number (the Ray Embedder
    writes this array into its Arrow column as it is). A model with pooling none (a vector
    per token) is a ValueError here: use ``embed``."""
    ctx = _embedding_ctx(llama, inputs)
    if int(ctx.pooling_type) == POOLING_NONE:
        raise ValueError("embed_array needs pooled embeddings; this context's pooling type is none (a vector per "
                         "token): use embed")
    token_lists, _ = _tokenized(llama, inputs, truncate)
    parts = _each_batch(llama, ctx, token_lists, lambda c, m: _decode_pooled(c, token_lists, m, normalize))
    if not parts:
        return np.zeros((0, int(llama.n_embd())), dtype=np.float32)
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


def embed(llama: Any, input: Union[str, List[str]], normalize: bool = False, truncate: bool = True,
          return_count: bool = False) -> Any:
    """See ``Llama.embed``."""
    inputs = [input] if isinstance(input, str) else input
    ctx = _embedding_ctx(llama, inputs)
    token_lists, total_tokens = _tokenized(llama, inputs, truncate)
    pooled = int(ctx.pooling_type) != POOLING_NONE
    data: List[Any] = []
    for part in _each_batch(llama, ctx, token_lists, lambda c, m: _decode_batch(c, token_lists, m, pooled, normalize)):
        data.extend(part)
    output = data[0] if isinstance(input, str) else data
    if return_count:
        return output, total_tokens
    return output


def create_embedding(llama: Any, input: Union[str, List[str]], model: Any = None) -> Dict[str, Any]:
    """See ``Llama.create_embedding``: the OpenAI ``/v1/embeddings`` response."""
    model_name = model if model is not None else llama.model_path
    inputs = input if isinstance(input, list) else [input]
    embeds, total_tokens = embed(llama, inputs, return_count=True)
    return {
        "object": "list",
        "data": [{"object": "embedding", "embedding": e, "index": i} for i, e in enumerate(embeds)],
        "model": model_name,
        "usage": {"prompt_tokens": total_tokens, "total_tokens": total_tokens},
    }


def embedding_context_options(n_batch: int, embedding: bool, pooling_type: int) -> Tuple[int, int]:
    """(n_seq_max, pooling_type) for the engine context of a Llama: with
    embeddings, room for as many sequences per batch as llama-cpp-python
    allows (min(n_batch, 256))."""
    return (min(n_batch, MAX_SEQUENCES) if embedding else 1), int(pooling_type)
