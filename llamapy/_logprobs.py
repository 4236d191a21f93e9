"""Row-wise log-probability arithmetic for ``perplexity`` (and ``imatrix``):
negative log-likelihoods of the observed tokens, the 16-bit quantized
log-probability rows of llama.cpp's KL-divergence base file, and the KL
divergence of a row of logits from such a stored row.

The work over the vocabulary runs in the engine (_engine.logprob_rows,
vendor/engine/cpu/logprobs.h: SIMD, the rows shared among n_threads, the GIL
released) directly on the logits view the context hands out, so no
(rows, n_vocab) temporary is ever made; Python only adds up O(rows) values
into ``KLDSums``. The arithmetic is llama-perplexity's (maxima, exponentials
and the quantization in float32, the sums of exponentials in float64), so
the stored rows it writes and ours agree to a rounding step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import numpy as np
import numpy.typing as npt

from ._engine import logprob_rows as _native


def row_words(n_vocab: int) -> int:
    """uint16 words of one stored row: two float32 (scale, min log-prob), then
    one word per vocabulary entry, padded to an even count."""
    return int(_native.row_words(n_vocab))


def nll(logits: npt.NDArray[np.float32], targets: npt.NDArray[np.int32],
        n_threads: int = 0) -> npt.NDArray[np.float64]:
    """-log softmax(logits)[target] per row (rows, n_vocab), in float64."""
    return _native.nll(logits, targets, n_threads)


def quantize_rows(logits: npt.NDArray[np.float32], targets: npt.NDArray[np.int32],
                  out: npt.NDArray[np.uint16], n_threads: int = 0) -> npt.NDArray[np.float64]:
    """Write the stored rows of `logits` into `out` (rows, row_words) and
    return each row's -log p(target) (float32 arithmetic, as stored).

    A row keeps log p(i) = min_log_prob + scale * q[i] with q in 0..65535 over
    the 16 nats below the top logit; anything lower is stored as q = 0."""
    return _native.store_rows(logits, targets, out, n_threads)


@dataclass
class KLDSums:
    """Running sums over scored tokens, llama-perplexity's KL statistics."""
    sum_nll: float = 0.0
    sum_nll2: float = 0.0
    sum_nll_base: float = 0.0
    sum_nll_base2: float = 0.0
    sum_nll_nll_base: float = 0.0
    sum_kld: float = 0.0
    sum_kld2: float = 0.0
    sum_p_diff: float = 0.0
    sum_p_diff2: float = 0.0
    sum_p_diff4: float = 0.0
    max_p_diff: float = 0.0
    n_same_top: int = 0
    count: int = 0


def kl_divergence_rows(logits: npt.NDArray[np.float32], base: npt.NDArray[np.uint16],
                       targets: npt.NDArray[np.int32], sums: KLDSums,
                       n_threads: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """Compare rows of logits with stored base rows (rows, row_words); add to
    `sums` and return each row's KL(base || model) (float32) and
    p(target) - p_base(target).

    Base entries more than 16 nats below the base's top one are left out of
    the divergence, as llama-perplexity does (their stored value is the floor)."""
    kld, p_diff, nll_q, nll_base, same_top = _native.kl_divergence(logits, base, targets, n_threads)
    nll64, nll_base64, p_diff64 = nll_q.astype(np.float64), nll_base.astype(np.float64), p_diff.astype(np.float64)
    sums.sum_nll += float(nll64.sum())
    sums.sum_nll2 += float((nll64 * nll64).sum())
    sums.sum_nll_base += float(nll_base64.sum())
    sums.sum_nll_base2 += float((nll_base64 * nll_base64).sum())
    sums.sum_nll_nll_base += float((nll64 * nll_base64).sum())
    sums.sum_kld += float(kld.sum())
    sums.sum_kld2 += float((kld * kld).sum())
    sums.sum_p_diff += float(p_diff64.sum())
    p2 = p_diff64 * p_diff64
    sums.sum_p_diff2 += float(p2.sum())
    sums.sum_p_diff4 += float((p2 * p2).sum())
    if len(kld):
        sums.max_p_diff = max(sums.max_p_diff, float(np.abs(p_diff64).max()))
    sums.n_same_top += int(same_top.sum())
    sums.count += len(kld)
    return kld.astype(np.float32), p_diff
