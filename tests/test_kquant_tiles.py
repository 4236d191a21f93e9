"""Batching does not change k-quant results: the mat-mat tiles (AVX-512:
4 rows × 2..4 columns, register blocked; quants/kquants_tiles_x86.cpp) give
the dot product's result bit for bit, at every ISA level, so a batch of tokens
computes exactly what the tokens one at a time compute.

The shapes make the driver form every tile it can: 4 rows × 1..4 columns and
the 1..3-row / 1..3-column edges, over 1, 3 and 8 super-blocks. The weights
are quantized Gaussians, random blocks (every quant and scale value) and
all-ones bits (the largest quants and scales); the activations include rows
whose Q8_K quants are all ±127, where the integer sums are largest.
"""
from __future__ import annotations

import numpy as np
import pytest

from llamapy import _engine
from quant_checks import LEVELS, has_k_tile, random_blocks, same_bits

K_TYPES = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
BLOCK_BYTES = {"Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210}
HALF_FIELDS = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}

# (n_rows, n_cols, n_tok): rows 23 = a 16-row job and 7 more (tiles of 4 and
# 3 rows, or 2 and 1), 6 and 5 (edges of 2 and 1); 9 and 5 tokens end in
# 1-column tiles. Up to 8 tokens the x86 levels take the small-batch kernels;
# from 9 the panels: 13 tokens are a group of 8 columns and one of 5 (a 4-column
# tile and a 1-column one), against 16 + 7 rows.
SHAPES = [(23, 768, 7), (6, 256, 9), (5, 2048, 6), (16, 768, 4), (8, 256, 3), (4, 256, 2), (23, 512, 13),
          (5, 256, 10)]


def weight_cases(rng, qtype, n_rows, n_cols):
    nb = n_rows * n_cols // 256
    quantized = _engine.quantize(rng.standard_normal((n_rows, n_cols)).astype(np.float32), qtype)
    rand = random_blocks(rng, BLOCK_BYTES[qtype], nb, HALF_FIELDS[qtype])
    ones = np.full((nb, BLOCK_BYTES[qtype]), 0xFF, np.uint8)
    for off in HALF_FIELDS[qtype]:
        ones[:, off:off + 2] = np.full(nb, 0.01, np.float16).view(np.uint8).reshape(-1, 2)
    return {"quantized": quantized.reshape(-1), "random": rand.reshape(-1), "ones": ones.reshape(-1)}


def activations(rng, n_tok, n_cols):
    x = rng.standard_normal((n_tok, n_cols)).astype(np.float32)
    x[0] = 1.0                                                  # every quant −127
    if n_tok > 2:
        x[1] = np.where(rng.random(n_cols) < 0.5, -1.0, 1.0)    # every quant ±127
    return x


@pytest.mark.parametrize("qtype", K_TYPES)
@pytest.mark.parametrize("level", LEVELS)
def test_batch_equals_one_token_at_a_time(qtype, level):
    rng = np.random.default_rng(42)
    for n_rows, n_cols, n_tok in SHAPES:
        x = activations(rng, n_tok, n_cols)
        for name, w in weight_cases(rng, qtype, n_rows, n_cols).items():
            batch = _engine.matmul(w, qtype, n_rows, n_cols, x, 2, level)
            for t in range(n_tok):
                one = _engine.matmul(w, qtype, n_rows, n_cols, x[t:t + 1], 1, level)[0]
                dots = _engine.vec_dot_rows(w, qtype, n_cols, x[t], level)
                assert same_bits(batch[t], one), (qtype, level, name, n_rows, n_cols, n_tok, t)
                assert same_bits(one, dots), (qtype, level, name, n_rows, n_cols, t)


@pytest.mark.parametrize("qtype", K_TYPES)
def test_tiles_are_used_at_the_best_level(qtype):
    # the batched path really goes through the tiles (and they agree with the
    # reference within the budget the dot products have, test_kquants.py)
    info = _engine.type_info(qtype)
    assert info["has_gemm_tile"] == has_k_tile(qtype)
    rng = np.random.default_rng(7)
    n_rows, n_cols, n_tok = 16, 512, 8
    w = _engine.quantize(rng.standard_normal((n_rows, n_cols)).astype(np.float32), qtype)
    x = rng.standard_normal((n_tok, n_cols)).astype(np.float32)
    ref = _engine.matmul(w, qtype, n_rows, n_cols, x, 1, "ref")
    got = _engine.matmul(w, qtype, n_rows, n_cols, x, 2, "best")
    scale = np.abs(ref).max()
    assert np.abs(got - ref).max() <= 1e-5 * scale
