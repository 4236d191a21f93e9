"""The engine's promise behind prefill == step-by-step decoding, speculative
decoding and prompt reuse: a row's product with a weight matrix is the same,
bit for bit, whether the row is multiplied alone (mat-vec), in a batch of
any size (mat-mat tiles) or on any number of threads, for every weight type
and every kernel level."""
from __future__ import annotations

import numpy as np
import pytest

from llamapy import _engine as E

TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
         "IQ4_NL", "IQ4_XS"]
LEVELS = ["scalar", "avx2", "best"]


@pytest.fixture(scope="module")
def mats():
    rng = np.random.default_rng(7)
    out = {}
    for t in TYPES:
        # 37 rows: full 4-row tiles, an edge tile, and more than one 16-row job
        w = rng.standard_normal((37, 512)).astype(np.float32)
        out[t] = E.quantize(w, t)
    return out, rng.standard_normal((11, 512)).astype(np.float32) * 2


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("t", TYPES)
def test_rows_do_not_depend_on_the_batch(mats, t, level):
    raw, x = mats
    w = raw[t]
    full = E.matmul(w, t, 37, 512, x, 2, level)
    for n in (1, 2, 3, 5):
        parts = np.concatenate([E.matmul(w, t, 37, 512, x[i:i + n], 2, level) for i in range(0, 11, n)])
        np.testing.assert_array_equal(parts, full, err_msg=f"{t} {level} batches of {n}")
    np.testing.assert_array_equal(E.matmul(w, t, 37, 512, x, 1, level), full, err_msg=f"{t} {level} 1 thread")
