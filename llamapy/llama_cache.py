"""Saved states and prompt caches for ``Llama`` (llama-cpp-python's
``LlamaState``, ``LlamaRAMCache`` / ``LlamaCache``).

A cache maps token sequences to saved states; a lookup returns the state whose
tokens share the longest prefix with the query, so a new prompt that extends
an old conversation only evaluates its new part.
"""
from __future__ import annotations

from collections import OrderedDict
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
