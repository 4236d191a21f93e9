"""The legacy block formats (vendor/engine/quants/legacy.cpp): Q4_0, Q4_1,
Q5_0, Q5_1, Q8_0 weights and the Q8_0 / Q8_1 activation formats.

- dequantization equals gguf-py's bit for bit on random blocks;
- quantization equals gguf-py's bit for bit (its quantizers mirror ggml's
  reference), on ordinary data and on the edges: zero and constant blocks,
  rounding ties, tiny and huge values; the fast activation quantizers write
  the reference's bytes;
- every ISA level's dot product agrees with the scalar reference, which
  agrees with float64; the matrix driver (mat-vec in 4-row tiles and the
  mat-mat tiles) agrees at odd shapes and thread counts.
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest

from llamapy import _engine
from quant_checks import activation_roundtrip, check_matmul, check_vec_dot, random_blocks, same_bits

WEIGHT_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24, "Q8_0": 34, "Q8_1": 36}
HALF_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q8_1": (0, 2)}
ACT_TYPE = {"Q4_0": "Q8_0", "Q4_1": "Q8_1", "Q5_0": "Q8_0", "Q5_1": "Q8_1", "Q8_0": "Q8_0"}
Q8_1_DTYPE = np.dtype([("d", "<f2"), ("s", "<f2"), ("qs", "i1", 32)])


def gguf_type(name):
    return gguf.GGMLQuantizationType[name]


def edge_rows(rng) -> np.ndarray:
    """Rows of 256 that exercise the quantizers' corner cases."""
    rows = []
    rows.append(np.zeros(256))                               # d = 0 everywhere
    rows.append(np.full(256, 0.75))                          # constant (Q4_1 / Q5_1: max == min)
    rows.append(np.full(256, -3.0))
    ties = np.tile(np.arange(-63.5, 64.5, 1.0)[:32], 8)     # x * (1/d) lands on .5 for Q8_0
    ties[::32] = 127.0
    rows.append(ties)
    rows.append(rng.standard_normal(256) * 1e-6)             # scales in fp16's subnormal range
    rows.append(rng.standard_normal(256) * 1e-9)             # scales that flush to zero in fp16
    rows.append(rng.standard_normal(256) * 3e5)              # d overflows fp16 for some types
    r = rng.standard_normal(256)
    r[5] = 50.0                                               # one outlier per row
    rows.append(r)
    mixed = rng.standard_normal(256)
    mixed[::7] = -mixed[::7] * 100                             # negative and positive extremes tie on |x|
    mixed[0], mixed[1] = 9.0, -9.0
    rows.append(mixed)
    rows.append(np.abs(rng.standard_normal(256)))           # all positive
    return np.array(rows, dtype=np.float32)


@pytest.mark.parametrize("qtype", WEIGHT_TYPES + ["Q8_1"])
def test_dequantize_random_blocks_bit_exact(qtype):
    rng = np.random.default_rng(7)
    raw = random_blocks(rng, BLOCK_BYTES[qtype], 512, HALF_FIELDS[qtype], scale=1.0)
    got = _engine.dequantize(raw, qtype, [512 * 32])
    if qtype == "Q8_1":  # not a file format: gguf-py has no Q8_1; it is d * q
        blocks = raw.view(Q8_1_DTYPE).reshape(-1)
        want = (blocks["qs"].astype(np.float32) * blocks["d"].astype(np.float32)[:, None]).reshape(-1)
    else:
        want = gguf.quants.dequantize(raw.reshape(-1), gguf_type(qtype)).reshape(-1)
    assert same_bits(got, want)


@pytest.mark.parametrize("qtype", WEIGHT_TYPES)
def test_quantize_matches_gguf(qtype):
    rng = np.random.default_rng(11)
    gauss = (rng.standard_normal((32, 512)) * rng.uniform(1e-3, 10, (32, 1))).astype(np.float32)
    for x in (gauss, edge_rows(rng)):
        with np.errstate(over="ignore"):
            want = gguf.quants.quantize(x, gguf_type(qtype))
        assert np.array_equal(_engine.quantize_ref(x, qtype), want)
        assert np.array_equal(_engine.quantize(x, qtype), want)


@pytest.mark.parametrize("qtype", WEIGHT_TYPES)
def test_quantize_roundtrip_error(qtype):
    """The reference quantizers reach each format's error budget (normalized
    RMSE on Gaussian data; measured Q4_0 .086, Q4_1 .078, Q5_0 .043,
    Q5_1 .038, Q8_0 .0054)."""
    bound = {"Q4_0": 0.095, "Q4_1": 0.086, "Q5_0": 0.047, "Q5_1": 0.042, "Q8_0": 0.006}[qtype]
    x = np.random.default_rng(3).standard_normal((16, 4096)).astype(np.float32)
    d = _engine.dequantize(_engine.quantize_ref(x, qtype), qtype, list(x.shape))
    assert np.sqrt(np.mean((d - x) ** 2)) / x.std() < bound


@pytest.mark.parametrize("act", ["Q8_0", "Q8_1"])
def test_activation_quantizers(act):
    """The fast (SIMD) activation quantizers write the reference's bytes; Q8_0
    is gguf-py's; Q8_1 is Q8_0 plus s = d * sum(q) in fp16 (d before its
    fp16 rounding, as ggml computes it)."""
    rng = np.random.default_rng(5)
    x = np.concatenate([(rng.standard_normal((64, 1024)) * rng.uniform(1e-4, 1e3, (64, 1))),
                        np.repeat(edge_rows(rng), 4, axis=1)]).astype(np.float32)
    with np.errstate(over="ignore"):
        q8_0 = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
    ref = _engine.quantize_ref(x, act)
    assert np.array_equal(_engine.quantize(x, act), ref)
    if act == "Q8_0":
        assert np.array_equal(ref, q8_0)
        return
    b = ref.reshape(-1, 36).view(Q8_1_DTYPE).reshape(-1)
    b0 = q8_0.reshape(-1, 34)
    assert np.array_equal(b["qs"].copy().view(np.uint8), b0[:, 2:])
    assert np.array_equal(b["d"].copy().view(np.uint16), b0[:, :2].copy().view(np.uint16).reshape(-1))
    amax = np.abs(x.reshape(-1, 32)).max(axis=1)
    d32 = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(over="ignore"):
        s = (b["qs"].astype(np.int32).sum(axis=1).astype(np.float32) * d32).astype(np.float16)
    assert np.array_equal(b["s"].copy().view(np.uint16), s.view(np.uint16))


def exact_dot(w_raw, qtype, n_rows, n_cols, a):
    """float64 dot of the operands the kernels see: gguf-py's dequantized
    weights and the dequantized activation blocks. For Q8_1 activations the
    min term uses the block's stored s (an fp16 of d * sum(q)), as the format
    defines, instead of d * sum(q) itself."""
    w64 = gguf.quants.dequantize(w_raw.reshape(n_rows, -1), gguf_type(qtype)).astype(np.float64)
    act = ACT_TYPE[qtype]
    a64 = activation_roundtrip(a[None], act)[0].astype(np.float64)
    exact = w64 @ a64
    scale = np.abs(w64) @ np.abs(a64)
    if act == "Q8_1":
        ab = _engine.quantize_ref(a[None], act).reshape(-1, 36).view(Q8_1_DTYPE).reshape(-1)
        s_stored = ab["s"].astype(np.float64)
        s_exact = ab["d"].astype(np.float64) * ab["qs"].astype(np.float64).sum(axis=1)
        bw = w_raw.reshape(n_rows, -1, BLOCK_BYTES[qtype])
        m = bw[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float64)  # (n_rows, n_blocks)
        exact = exact + m @ (s_stored - s_exact)
    return exact, scale


@pytest.mark.parametrize("qtype", WEIGHT_TYPES)
@pytest.mark.parametrize("n_cols", [32, 96, 256, 288, 1056, 4096])
def test_vec_dot_levels(qtype, n_cols):
    """n_cols covers rows shorter than one 8-block group, whole groups, and
    groups plus a tail (the AVX-512 kernels finish tails with AVX2)."""
    rng = np.random.default_rng(n_cols)
    w = rng.standard_normal((9, n_cols)).astype(np.float32)
    a = rng.standard_normal(n_cols).astype(np.float32)
    w_raw = _engine.quantize(w, qtype)
    exact, scale = exact_dot(w_raw, qtype, 9, n_cols, a)
    check_vec_dot(w_raw, qtype, n_cols, a, exact, scale)


@pytest.mark.parametrize("qtype", WEIGHT_TYPES)
def test_vec_dot_extreme_blocks(qtype):
    """Random bytes (every quant value, e.g. -128 in Q8_0) with scales of
    mixed magnitude: integer sums must not overflow or saturate."""
    rng = np.random.default_rng(17)
    n_cols = 2048
    w_raw = random_blocks(rng, BLOCK_BYTES[qtype], 6 * n_cols // 32, HALF_FIELDS[qtype], scale=1.0)
    w_raw = w_raw.reshape(6, -1)
    a = (rng.standard_normal(n_cols) * np.where(rng.random(n_cols) < 0.05, 100, 1)).astype(np.float32)
    exact, scale = exact_dot(w_raw.reshape(-1), qtype, 6, n_cols, a)
    check_vec_dot(w_raw, qtype, n_cols, a, exact, scale)


@pytest.mark.parametrize("qtype", WEIGHT_TYPES)
@pytest.mark.parametrize("n_rows,n_cols,n_tok", [(1, 32, 1), (3, 64, 3), (5, 288, 1), (17, 256, 17), (33, 800, 67),
                                                 (66, 512, 1), (13, 2080, 5)])
def test_matmul_odd_shapes(qtype, n_rows, n_cols, n_tok):
    rng = np.random.default_rng(n_rows * 7919 + n_cols)
    w = rng.standard_normal((n_rows, n_cols)).astype(np.float32)
    x = rng.standard_normal((n_tok, n_cols)).astype(np.float32)
    w_raw = _engine.quantize(w, qtype)
    w64 = _engine.dequantize(w_raw, qtype, [n_rows, n_cols]).astype(np.float64)
    if ACT_TYPE[qtype] == "Q8_1":
        # the min term goes through Q8_1's fp16 s: compare against the
        # reference path exactly instead, and loosely against float64
        ref = _engine.matmul(w_raw, qtype, n_rows, n_cols, x, 1, "ref")
        a64 = activation_roundtrip(x, "Q8_1").astype(np.float64)
        bound = np.abs(a64) @ np.abs(w64).T + 1e-30
        assert (np.abs(ref - a64 @ w64.T) / bound).max() < 1e-3
        for threads in (1, 2):
            y = _engine.matmul(w_raw, qtype, n_rows, n_cols, x, threads, "best")
            assert (np.abs(y - ref) / bound).max() < 8e-6
        return
    check_matmul(w_raw, qtype, n_rows, n_cols, x, w64, ACT_TYPE[qtype])


def test_type_info():
    for qtype in WEIGHT_TYPES:
        info = _engine.type_info(qtype)
        assert info["block_size"] == 32 and info["type_size"] == BLOCK_BYTES[qtype]
        assert info["can_dequantize"] and info["can_quantize"] and info["has_matmul"]
        assert info["vec_dot_type"] == ACT_TYPE[qtype]
    assert _engine.type_info("Q8_1")["type_size"] == 36


@pytest.mark.parametrize("qtype", ["Q4_0", "Q5_0", "Q8_0"])
@pytest.mark.parametrize("n_rows,n_cols,n_tok", [(20, 640, 9), (16, 256, 6), (12, 800, 5), (8, 2080, 4)])
def test_matmul_batch_equals_one_by_one(qtype, n_rows, n_cols, n_tok):
    # the register-blocked mat-mat tile (with its tail past the last group of
    # 8 blocks) must reproduce the mat-vec kernels bit for bit
    rng = np.random.default_rng(n_cols + n_tok)
    w_raw = _engine.quantize(rng.standard_normal((n_rows, n_cols)).astype(np.float32), qtype)
    x = rng.standard_normal((n_tok, n_cols)).astype(np.float32)
    batch = _engine.matmul(w_raw, qtype, n_rows, n_cols, x, 2, "best")
    for t in range(n_tok):
        one = _engine.matmul(w_raw, qtype, n_rows, n_cols, x[t:t + 1], 1, "best")
        np.testing.assert_array_equal(batch[t].view(np.uint32), one[0].view(np.uint32))
