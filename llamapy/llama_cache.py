"""Saved states and prompt caches for ``Llama`` (llama-cpp-python's
``LlamaState``, ``LlamaRAMCache`` / ``LlamaCache``, ``LlamaDiskCache``).

A cache maps token sequences to saved states; a lookup returns the state whose
tokens share the longest prefix with the query, so a new prompt that extends
an old conversation only evaluates its new part.
"""
from __future__ import annotations

import hashlib
import io
import os
from collections import OrderedDict
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt


class LlamaState:
    """Everything needed to resume a ``Llama``: the evaluated token ids, the
    scores kept for them (only with ``logits_all``), and the engine's KV-cache
    state as bytes."""

    def __init__(self, input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single], n_tokens: int,
                 llama_state: bytes, llama_state_size: int, seed: int) -> None:
        self.input_ids = input_ids
        self.scores = scores
        self.n_tokens = n_tokens
        self.llama_state = llama_state
        self.llama_state_size = llama_state_size
        self.seed = seed
        # (row, position shift) after each M-RoPE image chunk (Llama._pos_shifts):
        # where the rows after a Qwen image sit in position.
        self.pos_shifts: list = []

    def __sizeof__(self) -> int:
        return self.input_ids.nbytes + self.scores.nbytes + len(self.llama_state)


def longest_token_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class BaseLlamaCache:
    """Interface of a prompt cache (mapping of token sequences to states)."""

    def __init__(self, capacity_bytes: int = 2 << 30) -> None:
        self.capacity_bytes = capacity_bytes

    @property
    def cache_size(self) -> int:
        raise NotImplementedError

    def __getitem__(self, key: Sequence[int]) -> LlamaState:
        raise NotImplementedError

    def __contains__(self, key: Sequence[int]) -> bool:
        raise NotImplementedError

    def __setitem__(self, key: Sequence[int], value: LlamaState) -> None:
        raise NotImplementedError


class LlamaRAMCache(BaseLlamaCache):
    """An in-memory LRU cache of states, bounded by ``capacity_bytes``."""

    def __init__(self, capacity_bytes: int = 2 << 30) -> None:
        super().__init__(capacity_bytes)
        self.cache_state: "OrderedDict[Tuple[int, ...], LlamaState]" = OrderedDict()

    @property
    def cache_size(self) -> int:
        return sum(state.__sizeof__() for state in self.cache_state.values())

    def _find_prefix_key(self, key: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
        best, best_len = None, 0
        for k in self.cache_state:
            n = longest_token_prefix(k, key)
            if n > best_len:
                best, best_len = k, n
        return best

    def __getitem__(self, key: Sequence[int]) -> LlamaState:
        k = self._find_prefix_key(tuple(key))
        if k is None:
            raise KeyError("Key not found")
        self.cache_state.move_to_end(k)
        return self.cache_state[k]

    def __contains__(self, key: Sequence[int]) -> bool:
        return self._find_prefix_key(tuple(key)) is not None

    def __setitem__(self, key: Sequence[int], value: LlamaState) -> None:
        key = tuple(key)
        if key in self.cache_state:
            del self.cache_state[key]
        self.cache_state[key] = value
        while self.cache_size > self.capacity_bytes and len(self.cache_state) > 0:
            self.cache_state.popitem(last=False)


LlamaCache = LlamaRAMCache


class LlamaDiskCache(BaseLlamaCache):
    """A prompt cache in a directory, bounded by ``capacity_bytes`` (least
    recently used entries go first), surviving the process. One ``.npz`` file
    per state (token ids, scores, engine state; no pickles, so a cache
    directory never runs code when read). Unlike llama-cpp-python's, it needs
    no ``diskcache`` package."""

    SUFFIX = ".llamastate.npz"

    def __init__(self, cache_dir: str = ".cache/llama_cache", capacity_bytes: int = (2 << 30)) -> None:
        super().__init__(capacity_bytes)
        self.cache_dir = Path(cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._keys: dict = {}  # file name -> token tuple, read lazily
        for f in self.cache_dir.glob("*" + self.SUFFIX):
            try:
                with np.load(f, allow_pickle=False) as z:
                    self._keys[f.name] = tuple(int(t) for t in z["key"])
            except (OSError, ValueError, KeyError):
                continue  # not ours or damaged: ignored

    def _file(self, key: Tuple[int, ...]) -> Path:
        digest = hashlib.sha256(np.asarray(key, dtype=np.int64).tobytes()).hexdigest()[:32]
        return self.cache_dir / (digest + self.SUFFIX)

    @property
    def cache_size(self) -> int:
        return sum((self.cache_dir / n).stat().st_size for n in self._keys if (self.cache_dir / n).exists())

    def _find_prefix_key(self, key: Tuple[int, ...]) -> Optional[str]:
        best, best_len = None, 0
        for name, k in self._keys.items():
            n = longest_token_prefix(k, key)
            if n > best_len:
                best, best_len = name, n
        return best

    def __getitem__(self, key: Sequence[int]) -> LlamaState:
        name = self._find_prefix_key(tuple(key))
        if name is None:
            raise KeyError("Key not found")
        path = self.cache_dir / name
        with np.load(path, allow_pickle=False) as z:
            state = LlamaState(z["input_ids"].astype(np.intc), z["scores"].astype(np.single), int(z["n_tokens"]),
                               z["llama_state"].tobytes(), int(z["llama_state"].size), int(z["seed"]))
        os.utime(path)  # most recently used
        return state

    def __contains__(self, key: Sequence[int]) -> bool:
        return self._find_prefix_key(tuple(key)) is not None

    def __setitem__(self, key: Sequence[int], value: LlamaState) -> None:
        key = tuple(int(t) for t in key)
        path = self._file(key)
        buf = io.BytesIO()
        np.savez(buf, key=np.asarray(key, dtype=np.int64), input_ids=np.asarray(value.input_ids),
                 scores=np.asarray(value.scores), n_tokens=np.int64(value.n_tokens),
                 llama_state=np.frombuffer(bytes(value.llama_state), dtype=np.uint8), seed=np.int64(value.seed))
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, path)  # never a half-written entry
        self._keys[path.name] = key
        # Evict least recently used entries (by file time) beyond the capacity.
        while self.cache_size > self.capacity_bytes and len(self._keys) > 1:
            oldest = min((n for n in self._keys if n != path.name),
                         key=lambda n: (self.cache_dir / n).stat().st_mtime_ns)
            (self.cache_dir / oldest).unlink(missing_ok=True)
            del self._keys[oldest]

LogitsProcessor = Callable[[npt.NDArray[np.intc], npt.NDArray[np.single]], npt.NDArray[np.single]]
StoppingCriteria = Callable[[npt.NDArray[np.intc], npt.NDArray[np.single]], bool]


class LogitsProcessorList(List[LogitsProcessor]):
    """Applies each processor in turn: ``scores = p(input_ids, scores)``."""

    def __call__(self, input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


class StoppingCriteriaList(List[StoppingCriteria]):
    """True when any criterion says stop."""

    def __call__(self, input_ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> bool:
        return any(criterion(input_ids, logits) for criterion in self)


class MinTokensLogitsProcessor:
    """Bans end-of-sequence until at least ``min_tokens`` were generated."""

    def __init__(self, min_tokens: int, token_eos: int) -> None:
        self.min_tokens = min_tokens
        self.token_eos = token_eos
        self.prompt_tokens: Optional[int] = None

    def __call__(self, input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        if self.prompt_tokens is None:
            self.prompt_tokens = len(input_ids)
        if len(input_ids) - self.prompt_tokens < self.min_tokens:
            scores[self.token_eos] = -np.inf
        return scores
