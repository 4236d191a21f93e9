"""Row-wise log-probability arithmetic for ``perplexity``: negative
log-likelihoods of the observed tokens, the 16-bit quantized log-probability
rows of llama.cpp's KL-divergence base file, and the KL divergence of a row of
logits from such a stored row.

Everything works on whole (rows, n_vocab) float32 blocks with numpy, never a
Python loop over the vocabulary; callers hand in a few rows at a time
(``row_blocks``) so the temporaries stay near 64 MiB for any vocabulary.
The float32 / float64 split follows llama-perplexity's arithmetic (maxima,
exponentials and the quantization in float32, the sum of exponentials in
float64), so the stored rows it writes and ours agree to a rounding step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Tuple

import numpy as np
import numpy.typing as npt

_BLOCK_BYTES = 64 << 20
# A stored row keeps log-probabilities down to max - 16 (in nats, relative to
# the largest logit); everything below is stored as that floor.
_LOG_PROB_RANGE = 16.0
_Q_LEVELS = 65535.0


def row_blocks(n_rows: int, n_vocab: int) -> Iterator[slice]:
    """Slices of at most ~64 MiB of float32 rows each."""
    step = max(1, _BLOCK_BYTES // max(4 * n_vocab, 1))
    for r0 in range(0, n_rows, step):
        yield slice(r0, min(n_rows, r0 + step))


def _max_and_log_sum_exp(logits: npt.NDArray[np.float32]) -> Tuple[np.ndarray, np.ndarray]:
    """Per row: the largest logit (float32) and log(sum(exp(x - max)))
    (the sum in float64, its log rounded to float32)."""
    mx = logits.max(axis=1)
    sum_exp = np.exp(logits - mx[:, None]).sum(axis=1, dtype=np.float64)
    return mx, np.log(sum_exp).astype(np.float32)


def nll(logits: npt.NDArray[np.float32], targets: npt.NDArray[np.int32]) -> npt.NDArray[np.float64]:
    """-log softmax(logits)[target] per row, in float64."""
    mx, lse = _max_and_log_sum_exp(logits)
    picked = logits[np.arange(len(targets)), targets]
    return mx.astype(np.float64) + lse.astype(np.float64) - picked.astype(np.float64)


def row_words(n_vocab: int) -> int:
    """uint16 words of one stored row: two float32 (scale, min log-prob), then
    one word per vocabulary entry, padded to an even count."""
    return 2 * ((n_vocab + 1) // 2) + 4


def quantize_rows(logits: npt.NDArray[np.float32], targets: npt.NDArray[np.int32],
                  out: npt.NDArray[np.uint16]) -> npt.NDArray[np.float64]:
    """Write the stored rows of `logits` into `out` (rows, row_words) and
    return each row's -log p(target) (float32 arithmetic, as stored).

    A row keeps log p(i) = min_log_prob + scale * q[i] with q in 0..65535 over
    the 16 nats below the top logit; anything lower is stored as q = 0."""
    n_rows, n_vocab = logits.shape
    mx, lse = _max_and_log_sum_exp(logits)
    mn = np.maximum(logits.min(axis=1), mx - np.float32(_LOG_PROB_RANGE))
    min_log_prob = (mn - mx) - lse
    scale = (mx - mn) / np.float32(_Q_LEVELS)
    head = out[:, :4].view(np.float32)  # (rows, 2)
    head[:, 0] = scale
    head[:, 1] = min_log_prob
    flat = scale == 0
    inv = np.where(flat, np.float32(0), np.float32(1) / np.where(flat, np.float32(1), scale))
    shifted = logits - mn[:, None]
    q = np.rint(shifted * inv[:, None])
    q[shifted <= 0] = 0  # at or below the floor (and every entry of a flat row)
    out[:, 4:4 + n_vocab] = np.clip(q, 0, _Q_LEVELS).astype(np.uint16)
    out[:, 4 + n_vocab:] = 0
    picked = logits[np.arange(n_rows), targets]
    return ((mx + lse) - picked).astype(np.float64)


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
                       targets: npt.NDArray[np.int32], sums: KLDSums) -> Tuple[np.ndarray, np.ndarray]:
    """Compare rows of logits with stored base rows (rows, row_words); add to
    `sums` and return each row's KL(base || model) and p(target) - p_base(target).

    Base entries more than 16 nats below the base's top one are left out of
    the divergence, as llama-perplexity does (their stored value is the floor)."""
    n_rows, n_vocab = logits.shape
    rows = np.arange(n_rows)
    mx, lse = _max_and_log_sum_exp(logits)
    top = logits.argmax(axis=1)  # the first of equal maxima
    log_z = mx + lse
    nll = log_z - logits[rows, targets]  # float32
    head = np.ascontiguousarray(base[:, :4]).view(np.float32)
    scale, min_log_prob = head[:, 0:1], head[:, 1:2]
    log_p_base = scale * base[:, 4:4 + n_vocab].astype(np.float32) + min_log_prob
    nll_base = -log_p_base[rows, targets]
    top_base = log_p_base.argmax(axis=1)
    terms = np.exp(log_p_base) * (log_p_base - logits + log_z[:, None])
    kld = np.where(log_p_base > np.float32(-_LOG_PROB_RANGE), terms, np.float32(0)).sum(axis=1, dtype=np.float64)
    p_diff = np.exp(-nll) - np.exp(-nll_base)  # float32

    nll64, nll_base64, p_diff64 = nll.astype(np.float64), nll_base.astype(np.float64), p_diff.astype(np.float64)
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
    if n_rows:
        sums.max_p_diff = max(sums.max_p_diff, float(np.abs(p_diff64).max()))
    sums.n_same_top += int((top == top_base).sum())
    sums.count += n_rows
    return kld.astype(np.float32), p_diff
