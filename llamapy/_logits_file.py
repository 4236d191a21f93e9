"""llama-perplexity's KL-divergence base file (``--kl-divergence-base``):
the base model's log-probabilities over every scored token, so that another
model (a quantization of it) can be compared without running both at once.

Byte layout (little-endian), as llama-perplexity reads and writes it:

    offset  size                 field
    0       8                    magic b"_logits_"
    8       4   uint32           n_ctx (tokens per chunk)
    12      4   int32            n_vocab
    16      4   int32            n_chunk
    20      4 * n_chunk * n_ctx  int32 tokens, the text's first n_chunk * n_ctx
                                 tokens as tokenized (BOS not substituted)
    then per chunk, per scored position (n_ctx - 1 - n_ctx // 2 of them):
            2 * row_words(n_vocab)  one stored row (llamapy._logprobs): float32
                                 scale, float32 min_log_prob, n_vocab uint16
                                 levels, a zero uint16 if n_vocab is odd

This module reads and writes that layout and checks it; it knows nothing of
models.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from ._logprobs import row_words

MAGIC = b"_logits_"
_HEADER = struct.Struct("<8sIii")


def scored_per_chunk(n_ctx: int) -> int:
    """Positions whose next token is scored in a chunk: the second half,
    less the last position (its next token is outside the chunk)."""
    return n_ctx - 1 - n_ctx // 2


@dataclass
class LogitsFileHeader:
    n_ctx: int
    n_vocab: int
    n_chunk: int
    tokens: npt.NDArray[np.int32]  # (n_chunk * n_ctx,)


def write_header(f: BinaryIO, n_ctx: int, n_vocab: int, tokens: npt.NDArray[np.int32]) -> None:
    n_chunk = len(tokens) // n_ctx
    f.write(_HEADER.pack(MAGIC, n_ctx, n_vocab, n_chunk))
    f.write(np.ascontiguousarray(tokens[:n_chunk * n_ctx], dtype="<i4").tobytes())


def read_header(f: BinaryIO, path: str) -> LogitsFileHeader:
    """The header and tokens; ValueError for anything that is not such a
    file, or one cut short."""
    raw = f.read(_HEADER.size)
    if len(raw) < 8 or raw[:8] != MAGIC:
        raise ValueError(f"{path} does not look like a KL-divergence base file (llama-perplexity's "
                         f"--kl-divergence-base output starts with {MAGIC!r})")
    if len(raw) < _HEADER.size:
        raise ValueError(f"{path}: the header is cut short ({len(raw)} of {_HEADER.size} bytes)")
    _, n_ctx, n_vocab, n_chunk = _HEADER.unpack(raw)
    if n_ctx < 2 or n_vocab < 1 or n_chunk < 1:
        raise ValueError(f"{path}: implausible header (n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunk})")
    n_tok = n_ctx * n_chunk
    data = f.read(4 * n_tok)
    if len(data) < 4 * n_tok:
        raise ValueError(f"{path}: the token list is cut short ({len(data) // 4} of {n_tok} tokens)")
    tokens = np.frombuffer(data, dtype="<i4").astype(np.int32)
    return LogitsFileHeader(int(n_ctx), int(n_vocab), int(n_chunk), tokens)


def expected_size(n_ctx: int, n_vocab: int, n_chunk: int) -> int:
    return _HEADER.size + 4 * n_ctx * n_chunk + 2 * row_words(n_vocab) * scored_per_chunk(n_ctx) * n_chunk


def read_chunk_rows(f: BinaryIO, head: LogitsFileHeader, chunk: int, path: str) -> npt.NDArray[np.uint16]:
    """The next chunk's stored rows, (scored_per_chunk, row_words)."""
    n_rows, words = scored_per_chunk(head.n_ctx), row_words(head.n_vocab)
    data = f.read(2 * n_rows * words)
    if len(data) < 2 * n_rows * words:
        raise ValueError(f"{path}: the log-probabilities of chunk {chunk + 1} of {head.n_chunk} are cut short")
    return np.frombuffer(data, dtype="<u2").reshape(n_rows, words)
