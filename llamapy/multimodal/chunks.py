"""Prompts made of text and image chunks, as one token sequence the generation loop can reuse.

A multimodal prompt is a list of chunks: runs of text token ids, and image chunks (the
projector's embeddings for one image, or one tile of it). ``ChunkedPrompt`` flattens them
into a ``list`` of ints, so everything that handles prompts as token lists (length checks,
``Llama.input_ids``, prefix matching, the state cache) keeps working:

- an image chunk of n embedding rows stands in the list as n *placeholder ids*: negative
  numbers (never a real token id), each taken from a different 30-bit slice of a digest of
  the chunk's key (image content hash, projector, preprocessing, tile index, row). Two
  different images thus agree on a whole chunk of placeholders with negligible probability,
  and prefix matching over plain ints finds an image already in the KV cache;
- a prefix match that ends inside an image chunk is backed up to the chunk's start
  (``chunk_start_at_or_before``): an image is evaluated whole or not at all.

The embeddings themselves are fetched lazily (``ImageChunk.embd()``): a chunk the KV cache
already holds is never encoded again.

Not here: how chunks are made (handlers.py) and evaluated (``Llama._eval_chunked``).
"""
from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = ["ChunkedPrompt", "ImageChunk", "TextChunk", "placeholder_ids"]

_SLICE_BITS = 30


def placeholder_ids(key: str, n: int) -> List[int]:
    """``n`` negative ids derived from ``key`` (one per embedding row), in -2**30 .. -1."""
    out: List[int] = []
    counter = 0
    while len(out) < n:
        digest = hashlib.blake2b(f"{key}:{counter}".encode("utf-8"), digest_size=64).digest()
        counter += 1
        value = int.from_bytes(digest, "little")
        for _ in range((len(digest) * 8) // _SLICE_BITS):
            if len(out) == n:
                break
            out.append(-1 - (value & ((1 << _SLICE_BITS) - 1)))
            value >>= _SLICE_BITS
    return out


@dataclass
class TextChunk:
    tokens: List[int]

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def n_pos(self) -> int:
        return len(self.tokens)


@dataclass
class ImageChunk:
    """One image chunk: ``n_tokens`` embedding rows of width ``n_embd``.

    ``n_pos``: positions it takes (differs from n_tokens for M-RoPE models); ``grid``: the
    token grid (nx, ny); ``key``: what identifies its embeddings (content hash, projector,
    preprocessing, tile); ``non_causal``: llama.cpp decodes it with non-causal attention
    (Gemma 3); ``load``: returns the (n_tokens, n_embd) float32 embeddings."""

    n_tokens: int
    n_pos: int
    grid: Tuple[int, int]
    key: str
    load: Callable[[], np.ndarray] = field(repr=False)
    non_causal: bool = False
    mrope: bool = False

    def embd(self) -> np.ndarray:
        e = np.ascontiguousarray(self.load(), dtype=np.float32)
        if e.ndim != 2 or e.shape[0] != self.n_tokens:
            raise ValueError(f"image chunk embeddings have shape {e.shape}, expected ({self.n_tokens}, n_embd)")
        return e

    def placeholders(self) -> List[int]:
        return placeholder_ids(self.key, self.n_tokens)

    def positions(self, n_past: int) -> np.ndarray:
        """Positions for the chunk's rows starting at ``n_past``: 1-D (n_tokens,), or for
        M-RoPE (4, n_tokens) section-major as mtmd builds them: t = n_past for all rows,
        h = n_past + y, w = n_past + x, and a fourth section of zeros."""
        if not self.mrope:
            return np.arange(n_past, n_past + self.n_tokens, dtype=np.int32)
        nx, ny = self.grid
        pos = np.zeros((4, self.n_tokens), dtype=np.int32)
        ys, xs = np.divmod(np.arange(self.n_tokens, dtype=np.int32), nx)
        pos[0] = n_past
        pos[1] = n_past + ys
        pos[2] = n_past + xs
        return pos


Chunk = Union[TextChunk, ImageChunk]


class ChunkedPrompt(list):
    """The prompt's ids (text tokens and image placeholders) as a list, with its chunks."""

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        merged: List[Chunk] = []
        for c in chunks:
            if isinstance(c, TextChunk):
                if not c.tokens:
                    continue
                if merged and isinstance(merged[-1], TextChunk):
                    merged[-1] = TextChunk(merged[-1].tokens + list(c.tokens))
                    continue
            merged.append(c)
        ids: List[int] = []
        starts: List[int] = []
        for c in merged:
            starts.append(len(ids))
            ids.extend(c.tokens if isinstance(c, TextChunk) else c.placeholders())
        super().__init__(ids)
        self.chunks: List[Chunk] = merged
        self.starts: List[int] = starts

    @property
    def n_images(self) -> int:
        return sum(isinstance(c, ImageChunk) for c in self.chunks)

    @property
    def n_image_tokens(self) -> int:
        return sum(c.n_tokens for c in self.chunks if isinstance(c, ImageChunk))

    @property
    def n_pos(self) -> int:
        return sum(c.n_pos for c in self.chunks)

    def text_tokens(self) -> List[int]:
        return [t for c in self.chunks if isinstance(c, TextChunk) for t in c.tokens]

    def chunk_at(self, i: int) -> Tuple[int, Chunk]:
        """(start, chunk) of the chunk holding id ``i``."""
        k = bisect.bisect_right(self.starts, i) - 1
        return self.starts[k], self.chunks[k]

    def chunk_start_at_or_before(self, prefix: int) -> int:
        """``prefix`` itself when it ends between chunks or inside text, else the start of
        the image chunk it ends inside (a match never keeps part of an image)."""
        if prefix <= 0 or prefix >= len(self):
            return max(0, min(prefix, len(self)))
        start, chunk = self.chunk_at(prefix)
        if isinstance(chunk, ImageChunk) and start < prefix:
            return start
        return prefix

    def pieces_from(self, offset: int) -> List[Tuple[int, Chunk]]:
        """The chunks from id ``offset`` on (which must not be inside an image chunk) as
        (start, chunk); a text chunk cut by ``offset`` comes back as its tail."""
        out: List[Tuple[int, Chunk]] = []
        for start, c in zip(self.starts, self.chunks):
            end = start + c.n_tokens
            if end <= offset:
                continue
            if start < offset:
                if isinstance(c, ImageChunk):
                    raise ValueError("a prompt cannot resume inside an image chunk")
                c = TextChunk(c.tokens[offset - start:])
                start = offset
            out.append((start, c))
        return out


def is_chunked(prompt: object) -> bool:
    return isinstance(prompt, ChunkedPrompt)


def as_chunked(prompt: object) -> Optional[ChunkedPrompt]:
    return prompt if isinstance(prompt, ChunkedPrompt) else None
