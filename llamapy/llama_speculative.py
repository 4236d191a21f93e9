"""Draft models for speculative decoding, as llama-cpp-python's
``llama_cpp.llama_speculative``: ``Llama(..., draft_model=...)`` asks the
draft model for likely next tokens after each sampled token, evaluates them
in the same batch, and keeps those the sampler agrees with.

Because every kernel gives the same result for a row whether it is evaluated
alone or in a batch, drafting never changes the output: with a fixed seed the
tokens are exactly those of plain decoding, only fewer forward passes are run
when the drafts are right.
"""
from __future__ import annotations

import abc
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["LlamaDraftModel", "LlamaPromptLookupDecoding"]


class LlamaDraftModel(abc.ABC):
    """Proposes tokens to follow ``input_ids`` (the whole sequence so far)."""

    @abc.abstractmethod
    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        raise NotImplementedError


class LlamaPromptLookupDecoding(LlamaDraftModel):
    """Prompt lookup decoding: find the last ``n`` tokens (n from
    ``max_ngram_size`` down to 1) earlier in the sequence and propose the up
    to ``num_pred_tokens`` tokens that followed their first occurrence. Cheap,
    and effective whenever the output copies from the prompt (summaries,
    code edits, extraction, repetitive text)."""

    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10):
        if max_ngram_size < 1 or num_pred_tokens < 1:
            raise ValueError("max_ngram_size and num_pred_tokens must be >= 1")
        self.max_ngram_size = int(max_ngram_size)
        self.num_pred_tokens = int(num_pred_tokens)

    @staticmethod
    def find_candidate_pred_tokens(input_ids: npt.NDArray[np.intc], max_ngram_size: int,
                                   num_pred_tokens: int) -> npt.NDArray[np.intc]:
        ids = np.asarray(input_ids, dtype=np.intc).reshape(-1)
        n = len(ids)
        for size in range(min(max_ngram_size, n - 1), 0, -1):
            tail = ids[n - size:]
            # Start positions s < n - size whose n-gram equals the tail and
            # which have at least one token after them.
            windows = np.lib.stride_tricks.sliding_window_view(ids[: n - 1], size)
            hits = np.flatnonzero((windows == tail).all(axis=1))
            if len(hits):
                start = int(hits[0]) + size
                return ids[start:min(start + num_pred_tokens, n)].copy()
        return np.zeros(0, dtype=np.intc)

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        return self.find_candidate_pred_tokens(input_ids, self.max_ngram_size, self.num_pred_tokens)
