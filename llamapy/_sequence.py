"""One sequence's generation state in a context's KV cache, and how its rows get decoded.

A ``Sequence`` is what ``Llama.generate`` and a server slot share: the sequence id in the
KV cache, the token ids it holds there (placeholder ids for image rows), the M-RoPE
position shifts after image chunks, where the last token's logits are, the seed and the
lock that serialises its users. ``Llama`` owns sequence 0; the slot scheduler
(llamapy/server/slots.py) owns one per slot, all over one context.

Evaluating goes through a decoder: ``DirectDecoder`` calls ``Context.decode`` right away
(``Llama`` alone); the scheduler's decoder queues the rows and returns once its batched
step, shared with the other slots, has computed them. Either way the caller gets an
object with ``get_logits(i)`` / ``get_logits_all()`` for the rows it asked logits for.

Not here: sampling and the completion loop (``Llama.generate``, ``_completion.py``).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, List, Optional, Sequence as Seq, Tuple

import numpy as np
import numpy.typing as npt

__all__ = ["ContextFull", "DirectDecoder", "Sequence", "SequenceAttributes"]


class ContextFull(ValueError):
    """The KV cells a sequence may use are all taken (a shared pool ran out, or the
    sequence's own limit): the generation ends with finish_reason "length"."""


class DirectDecoder:
    """Decodes one sequence's rows at once on the context (no other sequence in the batch)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # the context's KV operations and decodes

    def decode(self, seq: "Sequence", tokens: Optional[np.ndarray], embd: Optional[np.ndarray],
               pos: np.ndarray, want: np.ndarray, causal: bool = True) -> Any:
        n = len(want)
        extra = {} if causal else {"causal": False}
        with self.lock:
            seq.ctx.decode(tokens=tokens, embd=embd, pos=pos, seq_ids=np.full(n, seq.seq_id, dtype=np.int32),
                            logits=want, **extra)
        return seq.ctx

    def remove_from(self, seq: "Sequence", pos: int) -> bool:
        with self.lock:
            return bool(seq.ctx.kv_seq_rm(seq.seq_id, pos, -1))

    def swa_resumable(self, seq: "Sequence", n: int) -> bool:
        with self.lock:
            return bool(seq.ctx.kv_swa_resumable(seq.seq_id, n))

    def resume_pos(self, seq: "Sequence", pos: int) -> int:
        with self.lock:
            return int(seq.ctx.kv_seq_resume_pos(seq.seq_id, pos))


class Sequence:
    """The rows one sequence holds in the KV cache and how to add to them.

    ``tokens[:n_tokens]`` are the evaluated ids; row r sits at position ``pos_of_row(r)``
    (less than r after an M-RoPE image chunk, which takes fewer positions than rows)."""

    def __init__(self, ctx: Any, seq_id: int, n_ctx: int, n_batch: int, n_vocab: int, seed: int,
                 decoder: Any = None, perf: Any = None) -> None:
        self.ctx = ctx
        self.seq_id = int(seq_id)
        self.n_ctx = int(n_ctx)            # the most rows this sequence may hold
        self.n_batch = int(n_batch)
        self.n_vocab = int(n_vocab)
        self.seed = int(seed)
        self.decoder = decoder if decoder is not None else DirectDecoder()
        self.perf = perf                   # PerfCounters (decode timings), or None
        self.lock = threading.RLock()      # one user of this sequence at a time
        self.tokens: npt.NDArray[np.intc] = np.zeros(self.n_ctx, dtype=np.intc)  # (n_ctx,)
        # Counts every change to the rows (decodes, resets, truncations, n_tokens
        # set): a suspended generation compares it to tell whether another user
        # of the sequence evaluated in between (Llama.generate).
        self.version = 0
        self._n_tokens = 0
        self.pos_shifts: List[Tuple[int, int]] = []  # (row, cumulative shift) after each M-RoPE image chunk
        self.logits_row = -1               # output row of the last decode holding the last token's logits
        self.eval_serial = 0               # counts decodes: a row read before one may be stale
        self.closed = False
        self.is_encoder = False            # an encoder-only model: nothing to generate with
        self.arch = ""
        # Called after every decoded chunk: (n_past, chunk ids, out, all_logits) (Llama's scores).
        self.observer: Optional[Callable[[int, np.ndarray, Any, bool], None]] = None
        self._out: Any = None              # what the last decode returned (get_logits(i))

    # ---------------------------------------------------------------- state
    @property
    def n_tokens(self) -> int:
        """How many rows are evaluated."""
        return self._n_tokens

    @n_tokens.setter
    def n_tokens(self, n: int) -> None:
        self._n_tokens = n
        self.version += 1

    def ensure_usable(self) -> None:
        if self.closed:
            raise ValueError("this Llama has been closed")
        if self.ctx is None:
            raise ValueError("the model was loaded with vocab_only=True: no context to evaluate with")

    def evaluated(self) -> npt.NDArray[np.intc]:
        """The ids of the evaluated rows (a view)."""
        return self.tokens[: self.n_tokens]

    def last_logits(self) -> Optional[npt.NDArray[np.single]]:
        """The logits after the last evaluated token (None before any)."""
        if self._out is None or self.logits_row < 0 or self.n_tokens == 0:
            return None
        return self._out.get_logits(self.logits_row)

    def reset(self) -> None:
        """Forget the evaluated rows (the KV cells are cleared lazily, at the next eval)."""
        self.n_tokens = 0
        self.logits_row = -1
        self.pos_shifts = []
        self.version += 1

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` evaluated rows (the cells past them are cleared lazily)."""
        self.n_tokens = n
        self.pos_shifts = [(row, shift) for row, shift in self.pos_shifts if row <= n]

    def pos_of_row(self, row: int) -> int:
        """The position of row ``row``: the row less what M-RoPE image chunks before it saved."""
        shift = 0
        for end, s in self.pos_shifts:
            if end <= row:
                shift = s
        return row - shift

    def common_prefix(self, tokens: Seq[int]) -> int:
        """How many leading ``tokens`` this sequence's rows already hold."""
        n = min(self.n_tokens, len(tokens))
        if n == 0:
            return 0
        a = self.tokens[:n]
        b = np.asarray(tokens[:n], dtype=np.intc)
        diff = np.nonzero(a != b)[0]
        return int(diff[0]) if len(diff) else n

    def reusable_prefix(self, tokens: Seq[int]) -> int:
        """How many leading ``tokens`` a generation from them keeps without evaluating them
        again: the shared prefix less the last token (its logits are needed), cut back to where
        a recurrent state can resume (its end or a checkpoint: what ``_rewind`` will do), and
        none when the sliding-window cells have moved past the prefix's end."""
        n = min(self.common_prefix(tokens), len(tokens) - 1)
        if n <= 0:
            return 0
        if n < self.n_tokens:
            pos = self.pos_of_row(n)
            m = self.decoder.resume_pos(self, pos)
            if m < pos:
                n = 0 if self.pos_shifts else m  # rows past an image cannot be evaluated again
        return n if n > 0 and self.swa_resumable(n) else 0

    def swa_resumable(self, n: int) -> bool:
        """Whether the sliding-window layers' cells still hold what a reuse of ``n`` rows needs."""
        return self.decoder.swa_resumable(self, n)

    # ----------------------------------------------------------- evaluation
    def eval(self, tokens: Seq[int], all_logits: bool = False,
             on_chunk: Optional[Callable[[int, np.ndarray, Any], None]] = None) -> None:
        """Evaluate ``tokens`` after the evaluated rows, in chunks of n_batch. ``all_logits``
        keeps every row's logits (else the last row's); ``on_chunk(n_past, chunk, out)`` sees
        each chunk with ``out.get_logits(j)`` for its row j (with all_logits)."""
        self.ensure_usable()
        if self.is_encoder:
            # The engine's own message names its keyword (embeddings); Llama's is embedding.
            raise ValueError(f"model architecture {self.arch!r} is an encoder: it computes embeddings only "
                             "(embed() or create_embedding(), on a Llama(..., embedding=True)); it cannot generate")
        toks = np.asarray(tokens, dtype=np.int32).reshape(-1)
        if len(toks) == 0:
            return
        if self.n_tokens + len(toks) > self.n_ctx:
            raise ValueError(f"Requested tokens ({self.n_tokens + len(toks)}) exceed context window of "
                             f"{self.n_ctx}")
        if ((toks < 0) | (toks >= self.n_vocab)).any():
            bad = int(toks[(toks < 0) | (toks >= self.n_vocab)][0])
            raise ValueError(f"token id {bad} is outside the vocabulary (0..{self.n_vocab - 1})")
        with self.lock:
            redo = self._rewind()
            if len(redo):
                self._eval_ids(redo, False, None)
            self._eval_ids(toks, all_logits, on_chunk)

    def _rewind(self) -> np.ndarray:
        """Make the context's rows of this sequence end where the evaluated rows end (rows
        past them, from a rewind, removed) and return the ids that must be evaluated again
        first. A model with recurrent layers (Qwen3.5) cannot cut its state at any row: it
        continues from the nearest end of its state or a checkpoint (the engine's
        kv_seq_resume_pos), at worst the start, and the rows after it are evaluated again.
        Never a state that still includes removed rows."""
        n = self.n_tokens
        pos = self.pos_of_row(n)
        m = self.decoder.resume_pos(self, pos)
        redo = np.zeros(0, dtype=np.int32)
        if m < pos:
            if self.pos_shifts or (self.tokens[m:n] < 0).any():
                # image rows cannot be evaluated again from their placeholder ids
                self.decoder.remove_from(self, 0)
                self.reset()
                raise ValueError("this model's recurrent state cannot be rewound to the kept rows, which hold an "
                                 "image: evaluate the prompt again from its start")
            redo = self.tokens[m:n].astype(np.int32)
            self.n_tokens = m
            self.logits_row = -1
            pos = m
        if not self.decoder.remove_from(self, pos):
            raise RuntimeError(f"the engine could not remove positions from {pos} on of sequence {self.seq_id}")
        return redo

    def _eval_ids(self, toks: np.ndarray, all_logits: bool,
                  on_chunk: Optional[Callable[[int, np.ndarray, Any], None]]) -> None:
        if len(toks):
            shift = self.n_tokens - self.pos_of_row(self.n_tokens)
            for start in range(0, len(toks), self.n_batch):
                chunk = toks[start:start + self.n_batch]
                n_past = self.n_tokens
                n = len(chunk)
                want = np.zeros(n, dtype=bool)
                if all_logits:
                    want[:] = True
                else:
                    want[-1] = True
                pos = np.arange(n_past - shift, n_past - shift + n, dtype=np.int32)
                out = self._decode(chunk, None, pos, want, True)
                self.tokens[n_past:n_past + n] = chunk
                if self.observer is not None:
                    self.observer(n_past, chunk, out, all_logits)
                if on_chunk is not None and all_logits:
                    on_chunk(n_past, chunk, out)
                self.n_tokens += n
                self.logits_row = n - 1 if all_logits else 0

    def eval_embd(self, embd: np.ndarray, pos: np.ndarray, ids: np.ndarray, n_pos: int, step: int,
                  causal: bool = True) -> None:
        """Evaluate embedding rows (an image chunk) after the evaluated rows, ``step`` rows a
        decode; ``ids`` are the rows' placeholder ids, ``pos`` their positions ((n,) or (4, n));
        the chunk moves the position on by ``n_pos`` (fewer than its rows for M-RoPE)."""
        self.ensure_usable()
        n = len(ids)
        if self.n_tokens + n > self.n_ctx:
            raise ValueError(f"Prompt exceeds n_ctx: {self.n_tokens + n} > {self.n_ctx}")
        with self.lock:
            redo = self._rewind()
            if len(redo):
                self._eval_ids(redo, False, None)
            row0 = self.n_tokens
            p0 = self.pos_of_row(row0)
            for start in range(0, n, step):
                end = min(n, start + step)
                m = end - start
                want = np.zeros(m, dtype=bool)
                want[-1] = True  # one row of logits: the prompt may end with an image
                self._decode(None, embd[start:end], np.ascontiguousarray(pos[..., start:end]), want, causal)
                self.tokens[self.n_tokens:self.n_tokens + m] = ids[start:end]
                self.n_tokens += m
                self.logits_row = 0
            if n_pos != n:
                shift = (row0 - p0) + (n - n_pos)
                kept = [e for e in self.pos_shifts if e[0] <= row0]
                self.pos_shifts = kept + [(self.n_tokens, shift)]

    def _decode(self, tokens: Optional[np.ndarray], embd: Optional[np.ndarray], pos: np.ndarray,
                want: np.ndarray, causal: bool) -> Any:
        t0 = time.perf_counter()
        out = self.decoder.decode(self, tokens, embd, pos, want, causal)
        if self.perf is not None:
            self.perf.add_decode(len(want), time.perf_counter() - t0)
        self._out = out
        self.eval_serial += 1
        self.version += 1
        return out


def _view(name: str, convert: Optional[Callable[[Any], Any]] = None, writable: bool = True) -> property:
    """A property reading (and, if writable, setting through ``convert``) ``self._seq.<name>``."""

    def get(self: Any) -> Any:
        return getattr(self._seq, name)

    def set_(self: Any, value: Any) -> None:
        setattr(self._seq, name, convert(value) if convert else value)

    return property(get, set_ if writable else None)


class SequenceAttributes:
    """``Llama``'s per-sequence attributes, under the names llama-cpp-python's users (and
    llamapy's tests) know, as views of its ``_seq`` (a Sequence)."""

    _seq: Sequence

    @property
    def _input_ids(self) -> npt.NDArray[np.intc]:
        return self._seq.evaluated()

    input_ids = _view("tokens", writable=False)
    n_tokens = _view("n_tokens", int)
    _pos_shifts = _view("pos_shifts", list)
    _last_logits_row = _view("logits_row", int)
    _eval_serial = _view("eval_serial", writable=False)
    _seed = _view("seed", int)
    _lock = _view("lock", writable=False)
    _perf = _view("perf")
