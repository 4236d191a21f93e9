"""The non-linear 4-bit formats (vendor/engine/quants/iquants.cpp): IQ4_NL
(vs Q8_0 activations) and IQ4_XS (vs Q8_K activations, from kquants.cpp).

gguf-py dequantizes these types but cannot quantize them, so:
- dequantization equals gguf-py's bit for bit on random blocks;
- the quantizers (llama.cpp's scale search, no importance matrix) are checked
  for their error budget, for beating Q4_0 at equal or fewer bits, for
  determinism, for zero / constant / outlier rows, and for stability: fed
  their own output they give (nearly) the same blocks back;
- every ISA level's dot product agrees with the reference, which agrees with
  float64; the matrix driver agrees at odd shapes and thread counts.
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest

from llamapy import _engine
from quant_checks import activation_roundtrip, check_matmul, check_vec_dot, random_blocks, same_bits

TYPES = ["IQ4_NL", "IQ4_XS"]
BLOCK = {"IQ4_NL": (32, 18), "IQ4_XS": (256, 136)}  # elements, bytes
ACT_TYPE = {"IQ4_NL": "Q8_0", "IQ4_XS": "Q8_K"}
# normalized RMSE on Gaussian data, 16 rows of 4096 (measured: IQ4_NL 0.0765,
# IQ4_XS 0.0770; Q4_0 0.0862)
NRMSE_BOUND = {"IQ4_NL": 0.080, "IQ4_XS": 0.081}


def quantize_roundtrip(x, qtype):
    q = _engine.quantize_ref(x, qtype)
    return q, _engine.dequantize(q, qtype, list(x.shape))


def nrmse(d, x):
    return float(np.sqrt(np.mean((d.astype(np.float64) - x) ** 2)) / x.std())


@pytest.mark.parametrize("qtype", TYPES)
def test_dequantize_random_blocks_bit_exact(qtype):
    rng = np.random.default_rng(1)
    n_el, n_bytes = BLOCK[qtype]
    raw = random_blocks(rng, n_bytes, 300, (0,), scale=1.0)
    got = _engine.dequantize(raw, qtype, [300 * n_el])
    want = gguf.quants.dequantize(raw.reshape(-1), gguf.GGMLQuantizationType[qtype]).reshape(-1)
    assert same_bits(got, want)


@pytest.mark.parametrize("qtype", TYPES)
def test_quantize_error_budget(qtype):
    x = np.random.default_rng(3).standard_normal((16, 4096)).astype(np.float32)
    _, d = quantize_roundtrip(x, qtype)
    err = nrmse(d, x)
    assert err < NRMSE_BOUND[qtype]
    # the non-linear grid beats Q4_0 (4.5 bits per weight) with 4.5 (NL) and 4.25 (XS) bits
    q4 = _engine.dequantize(_engine.quantize_ref(x, "Q4_0"), "Q4_0", list(x.shape))
    assert err < nrmse(q4, x)


@pytest.mark.parametrize("qtype", TYPES)
def test_quantize_keeps_block_extremes(qtype):
    """The scale search starts from the block's largest value, so that value
    comes back within a table step (the grid is coarsest at its ends: 113 to
    127 is ~12%), at any magnitude."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((8, 1024)) * rng.uniform(0.01, 100, (8, 1))).astype(np.float32)
    _, d = quantize_roundtrip(x, qtype)
    xb, db = x.reshape(-1, 32), d.reshape(-1, 32)
    imax = np.abs(xb).argmax(axis=1)
    big, got = xb[np.arange(len(xb)), imax], db[np.arange(len(db)), imax]
    assert (np.sign(got) == np.sign(big)).all()
    assert (np.abs(got - big) <= 0.15 * np.abs(big)).all()


@pytest.mark.parametrize("qtype", TYPES)
def test_quantize_edge_rows(qtype):
    rng = np.random.default_rng(6)
    zero = np.zeros((1, 512), np.float32)
    _, d = quantize_roundtrip(zero, qtype)
    assert not np.any(d)
    const = np.full((1, 512), -2.5, np.float32)
    _, d = quantize_roundtrip(const, qtype)
    assert np.allclose(d, const, rtol=2e-3)
    outlier = rng.standard_normal((4, 512)).astype(np.float32)
    outlier[:, 77] = 400.0
    _, d = quantize_roundtrip(outlier, qtype)
    assert np.isfinite(d).all() and abs(d[0, 77] - 400.0) < 400.0 * 0.02
    tiny = (rng.standard_normal((2, 512)) * 1e-20).astype(np.float32)
    _, d = quantize_roundtrip(tiny, qtype)
    assert np.isfinite(d).all()


@pytest.mark.parametrize("qtype", TYPES)
def test_quantize_deterministic_and_stable(qtype):
    """Same input, same bytes; and quantizing the dequantized output again
    reproduces almost every block (the search may move a scale by one fp16
    step where two fits tie), with no added error to speak of."""
    x = np.random.default_rng(8).standard_normal((8, 2048)).astype(np.float32)
    q1, d1 = quantize_roundtrip(x, qtype)
    assert np.array_equal(q1, _engine.quantize_ref(x, qtype))
    assert np.array_equal(q1, _engine.quantize(x, qtype))
    q2, d2 = quantize_roundtrip(d1, qtype)
    n_bytes = BLOCK[qtype][1]
    same_blocks = np.mean(np.all(q1.reshape(-1, n_bytes) == q2.reshape(-1, n_bytes), axis=1))
    assert same_blocks > 0.9
    assert nrmse(d2, d1) < 0.01


def exact_dot(w_raw, qtype, n_rows, n_cols, a):
    w64 = gguf.quants.dequantize(w_raw.reshape(n_rows, -1), gguf.GGMLQuantizationType[qtype]).astype(np.float64)
    a64 = activation_roundtrip(a[None], ACT_TYPE[qtype])[0].astype(np.float64)
    return w64 @ a64, np.abs(w64) @ np.abs(a64)


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("n_cols", [256, 512, 2304, 4096])
def test_vec_dot_levels(qtype, n_cols):
    rng = np.random.default_rng(n_cols)
    w = rng.standard_normal((9, n_cols)).astype(np.float32)
    a = rng.standard_normal(n_cols).astype(np.float32)
    w_raw = _engine.quantize(w, qtype)
    exact, scale = exact_dot(w_raw, qtype, 9, n_cols, a)
    check_vec_dot(w_raw, qtype, n_cols, a, exact, scale)


@pytest.mark.parametrize("n_cols", [32, 96, 288])
def test_vec_dot_iq4_nl_short_rows(n_cols):
    """Rows shorter than, or not a multiple of, the AVX-512 kernel's 8 blocks."""
    rng = np.random.default_rng(n_cols)
    w = rng.standard_normal((5, n_cols)).astype(np.float32)
    a = rng.standard_normal(n_cols).astype(np.float32)
    w_raw = _engine.quantize(w, "IQ4_NL")
    exact, scale = exact_dot(w_raw, "IQ4_NL", 5, n_cols, a)
    check_vec_dot(w_raw, "IQ4_NL", n_cols, a, exact, scale)


@pytest.mark.parametrize("qtype", TYPES)
def test_vec_dot_random_blocks(qtype):
    """Every index and every sub-block scale (-32..31) with mixed scales."""
    rng = np.random.default_rng(9)
    n_el, n_bytes = BLOCK[qtype]
    n_cols = 2048
    w_raw = random_blocks(rng, n_bytes, 6 * n_cols // n_el, (0,), scale=1.0).reshape(6, -1)
    a = (rng.standard_normal(n_cols) * np.where(rng.random(n_cols) < 0.05, 100, 1)).astype(np.float32)
    exact, scale = exact_dot(w_raw.reshape(-1), qtype, 6, n_cols, a)
    check_vec_dot(w_raw, qtype, n_cols, a, exact, scale)


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("n_rows,n_cols,n_tok", [(1, 256, 1), (3, 512, 3), (17, 256, 17), (33, 768, 67), (66, 512, 1),
                                                 (13, 2304, 5)])
def test_matmul_odd_shapes(qtype, n_rows, n_cols, n_tok):
    rng = np.random.default_rng(n_rows * 7919 + n_cols)
    w = rng.standard_normal((n_rows, n_cols)).astype(np.float32)
    x = rng.standard_normal((n_tok, n_cols)).astype(np.float32)
    w_raw = _engine.quantize(w, qtype)
    w64 = _engine.dequantize(w_raw, qtype, [n_rows, n_cols]).astype(np.float64)
    check_matmul(w_raw, qtype, n_rows, n_cols, x, w64, ACT_TYPE[qtype])


def test_type_info():
    for qtype in TYPES:
        info = _engine.type_info(qtype)
        assert (info["block_size"], info["type_size"]) == BLOCK[qtype]
        assert info["can_dequantize"] and info["can_quantize"] and info["has_matmul"]
        assert info["vec_dot_type"] == ACT_TYPE[qtype]
