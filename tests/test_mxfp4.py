"""MXFP4 (vendor/engine/quants/mxfp4*.cpp), gpt-oss's expert format: blocks of
32 4-bit E2M1 codes with one E8M0 exponent, against Q8_0 activations.

gguf-py both dequantizes and quantizes MXFP4 (as llama.cpp does, float op for
float op), so:
- dequantization equals gguf-py's bit for bit, every exponent byte included;
- quantization equals gguf-py's byte for byte on random data at all scales,
  zeros, signed zeros, exact ties between codes, values just below powers of
  two (where log2f rounds up), subnormal block scales and subnormal inputs;
  and, independently of gguf-py, every value takes a nearest code;
- on the committed gpt-oss fixture, llama.cpp's MXFP4 tensors decode as
  gguf-py decodes them, and re-quantizing the F16 file's tensors gives the
  bytes llama.cpp wrote;
- every ISA level's dot product agrees with the reference (NEON: bit for
  bit), which agrees with float64; the matrix driver agrees at odd shapes and
  thread counts, a row's result does not depend on its batch, and the
  mixture-of-experts products equal the dense driver's.
"""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from llamapy import GGUFFile, _engine
from quant_checks import LEVELS, activation_roundtrip, check_matmul, check_vec_dot, same_bits

QT = gguf.GGMLQuantizationType.MXFP4
BLOCK_BYTES = 17
FIXTURES = Path(__file__).parent / "data" / "moe" / "gptoss"
# The doubled E2M1 values of the 16 codes (the format's table).
KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.float64)


def gguf_quantize(x):
    with np.errstate(over="ignore"):  # near FLT_MAX, |grid - x| overflows to inf (as in C)
        return gguf.quants.quantize(np.ascontiguousarray(x, np.float32), QT)


def gguf_dequantize(raw):
    with np.errstate(over="ignore"):  # e = 255: 12 * 2^127 is inf
        return gguf.quants.dequantize(np.ascontiguousarray(raw), QT)


def random_blocks(rng, n_blocks, e_lo=110, e_hi=140):
    """Random codes with exponents in [e_lo, e_hi] plus a few subnormal
    scales (e = 0, 1) and all-ones bytes (the code -12 everywhere)."""
    raw = rng.integers(0, 256, size=(n_blocks, BLOCK_BYTES), dtype=np.uint8)
    raw[:, 0] = rng.integers(e_lo, e_hi + 1, n_blocks)
    raw[::17, 0] = rng.integers(0, 2, len(raw[::17]))
    raw[5::23, 1:] = 0xFF
    return raw


def test_type_info():
    info = _engine.type_info("MXFP4")
    assert (info["id"], info["block_size"], info["type_size"]) == (39, 32, 17)
    assert info["is_quantized"] and info["can_dequantize"] and info["can_quantize"] and info["has_matmul"]
    assert info["vec_dot_type"] == "Q8_0"
    assert info["has_gemm_tile"] == (info["kernel_isa"] != "scalar")
    assert _engine.row_size("MXFP4", 2880) == 90 * 17
    assert _engine.type_info(int(QT))["name"] == "MXFP4"


def test_dequantize_every_exponent_bit_exact():
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, size=(512, BLOCK_BYTES), dtype=np.uint8)
    raw[:256, 0] = np.arange(256)  # every E8M0 byte, 0 and 1 (subnormal scales) and 255 included
    got = _engine.dequantize(raw, "MXFP4", [512 * 32])
    assert same_bits(got, gguf_dequantize(raw).reshape(-1))


def test_dequantize_layout_by_hand():
    """Byte 0 is the exponent; element j is the low nibble of byte 1 + j and
    element 16 + j its high nibble; value = table[code] * 2^(e - 128)."""
    raw = np.zeros((2, BLOCK_BYTES), np.uint8)
    raw[0, 0] = 128                                    # scale 2^0 on the doubled codes
    raw[0, 1:] = np.arange(16) | (np.arange(16)[::-1] << 4)
    raw[1, 0] = 1                                      # 2^-127, a subnormal float
    raw[1, 1] = 0x97                                   # code 7 (12) low, code 9 (-1) high
    got = _engine.dequantize(raw, "MXFP4", [64])
    assert got[:16].tolist() == KVALUES.tolist()
    assert got[16:32].tolist() == KVALUES[::-1].tolist()
    assert got[32] == np.float32(12 * 2.0**-127) and got[48] == np.float32(-(2.0**-127))
    assert not np.any(got[33:48]) and not np.any(got[49:])


def quantizer_inputs(rng):
    """Rows of 512 for the byte comparison with gguf-py."""
    rows = []
    g = rng.standard_normal((6, 512))
    for scale in (1.0, 1e-3, 40.0, 1e-20, 1e20, 3e36):
        rows.append(g[len(rows)] * scale)
    # blocks of zeros and signed zeros, a lone value, a constant row
    z = np.zeros(512)
    z[32:64] = -0.0
    z[70] = -3.0
    z[100:128] = 0.75
    rows.append(z)
    # values just below and at powers of two: floor(log2f(x)) rounds up for
    # x a few ulps below 2^k (k >= 2), and the block's top value sets e
    powers = (2.0 ** rng.integers(-100, 100, 512)).astype(np.float32)
    below = (powers.view(np.int32) - rng.integers(1, 40, 512).astype(np.int32)).view(np.float32)
    rows.append(below * rng.choice([-1, 1], 512))
    rows.append(np.where(rng.random(512) < 0.5, powers, below))
    # exact ties between neighbouring codes: the block max 6 fixes the scale 1
    # on the E2M1 values, and every midpoint of the code grid appears
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0])
    t = np.concatenate([mids, -mids] * 32)[:512]
    t[::32] = 6.0
    rows.append(t)
    # subnormal block scales (amax in [2^-125, 2^-123): e = 0, 1) and
    # subnormal or tiny inputs (e wraps modulo 256, as llama.cpp on x86)
    rows.append(rng.standard_normal(512) * 2.0**-124)
    rows.append(rng.standard_normal(512) * 1e-40)
    rows.append(rng.standard_normal(512) * 2.0**-126)
    # the largest finite floats
    h = rng.uniform(-1, 1, 512) * 3.4e38
    h[::7] = 3.4028235e38
    rows.append(h)
    return np.array(rows, np.float32)


def test_quantize_equals_gguf_py():
    x = quantizer_inputs(np.random.default_rng(2))
    assert np.isfinite(x).all()
    q = _engine.quantize(x, "MXFP4")
    assert q.shape == (len(x), 16 * BLOCK_BYTES)
    want = gguf_quantize(x)
    for r in range(len(x)):
        assert np.array_equal(q[r], want[r]), f"row {r}: blocks {np.nonzero((q[r] != want[r]).reshape(-1, 17).any(1))[0]}"
    assert np.array_equal(_engine.quantize_ref(x, "MXFP4"), q)
    # the rows reach every exponent class: subnormal scales, wrapped, huge
    e = q.reshape(-1, BLOCK_BYTES)[:, 0]
    assert {0, 1} <= set(e.tolist()) and e.max() >= 250 and ((e > 128) & (e < 140)).any()


def test_quantize_random_equals_gguf_py():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((32, 1024)) * np.exp(rng.uniform(-20, 20, (32, 1)))).astype(np.float32)
    assert np.array_equal(_engine.quantize(x, "MXFP4"), gguf_quantize(x))


def test_quantize_picks_a_nearest_code():
    """Independent of gguf-py: each value decodes to a grid point of its
    block's scale at least as close as any other, and the exponent puts the
    block's largest magnitude in [4, 8) scale units (one more only for
    values a few ulps below a power of two, where log2f rounds up)."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((8, 2048)) * np.exp(rng.uniform(-8, 8, (8, 1)))).astype(np.float32)
    # in every other block of the last row, a top value 1..39 ulps below a power of two
    powers = (2.0 ** rng.integers(-60, 60, 32)).astype(np.float32)
    x[-1, ::64] = (powers.view(np.int32) - rng.integers(1, 40, 32).astype(np.int32)).view(np.float32)
    x[-1] = np.clip(x[-1], -np.abs(x[-1, ::64]).repeat(64), np.abs(x[-1, ::64]).repeat(64))
    q = _engine.quantize(x, "MXFP4")
    d = _engine.dequantize(q, "MXFP4", list(x.shape)).reshape(-1, 32).astype(np.float64)
    xb = x.reshape(-1, 32).astype(np.float64)
    e = q.reshape(-1, BLOCK_BYTES)[:, 0].astype(np.int64)
    half_scale = 2.0 ** (e - 128)
    grid = KVALUES[None, :] * half_scale[:, None]                    # (blocks, 16)
    best = np.abs(grid[:, None, :] - xb[:, :, None]).min(axis=2)     # (blocks, 32)
    assert (np.abs(d - xb) <= best).all()
    amax = np.abs(xb).max(axis=1)
    units = amax / (2 * half_scale)
    below_power = np.exp2(np.ceil(np.log2(amax))) - amax <= amax * 2.0**-16
    assert (((units >= 4) & (units < 8)) | (below_power & (units >= 4 * (1 - 2.0**-16)) & (units < 4))).all()
    assert (below_power & (units < 4)).sum() >= 8  # the rounded-up case occurs


def test_quantize_round_trip_is_exact_on_the_grid():
    """Values that are codes times a block scale come back exactly (the
    block max 6 or -6 in scale units fixes the exponent)."""
    rng = np.random.default_rng(5)
    codes = rng.integers(0, 16, (64, 32))
    codes[:, 0] = rng.choice([6, 14], 64)  # 12 or -12 doubled: 6 or -6
    scale = 2.0 ** rng.integers(-30, 30, (64, 1))
    x = (KVALUES[codes] / 2 * scale).astype(np.float32)
    d = _engine.dequantize(_engine.quantize(x, "MXFP4"), "MXFP4", list(x.shape))
    assert same_bits(d, x + 0.0)  # -0.0 codes come back +0.0: compare after adding +0


# ---------------------------------------------------------------------------
# llama.cpp's files
# ---------------------------------------------------------------------------


def fixture_tensors():
    mx = GGUFFile(FIXTURES / "gptoss-mxfp4_moe.gguf")
    f16 = GGUFFile(FIXTURES / "gptoss-f16.gguf")
    names = [t.name for t in mx.tensors if t.type_name == "MXFP4"]
    return mx, f16, names


def test_llama_cpp_tensors_decode_as_gguf_py_decodes_them():
    mx, _, names = fixture_tensors()
    assert len(names) == 12  # ffn_{gate,up,down}_exps of 4 layers
    ref = {t.name: t for t in gguf.GGUFReader(FIXTURES / "gptoss-mxfp4_moe.gguf").tensors}
    for name in names:
        info = mx.tensor_info(name)
        raw = mx.tensor(name)
        assert info.type == 39 and info.shape == (8, 64, 64) and raw.shape == (8, 64, 2 * BLOCK_BYTES)
        assert np.array_equal(raw.reshape(-1), np.asarray(ref[name].data).reshape(-1))
        got = _engine.dequantize(raw, "MXFP4", list(info.shape))
        assert same_bits(got, gguf_dequantize(raw).reshape(info.shape)), name


def test_requantizing_the_f16_experts_gives_llama_cpps_bytes():
    mx, f16, names = fixture_tensors()
    for name in names:
        x = f16.tensor(name).astype(np.float32)
        assert f16.tensor_info(name).type_name == "F16"
        assert np.array_equal(_engine.quantize(x, "MXFP4"), mx.tensor(name)), name


# ---------------------------------------------------------------------------
# Dot products and the matrix driver
# ---------------------------------------------------------------------------


def exact_dot(w_raw, n_rows, a):
    w64 = gguf_dequantize(w_raw.reshape(n_rows, -1)).astype(np.float64)
    a64 = activation_roundtrip(a[None], "Q8_0")[0].astype(np.float64)
    return w64 @ a64, np.abs(w64) @ np.abs(a64)


@pytest.mark.parametrize("n_cols", [32, 64, 96, 288, 2880, 4096])
def test_vec_dot_levels_on_quantized_rows(n_cols):
    """Odd block counts (1, 3, 9, 90) leave the AVX-512 kernel's last block alone."""
    rng = np.random.default_rng(n_cols)
    w = rng.standard_normal((9, n_cols)).astype(np.float32)
    a = rng.standard_normal(n_cols).astype(np.float32)
    w_raw = _engine.quantize(w, "MXFP4")
    exact, scale = exact_dot(w_raw, 9, a)
    check_vec_dot(w_raw, "MXFP4", n_cols, a, exact, scale)


@pytest.mark.parametrize("n_cols", [96, 2048])
def test_vec_dot_levels_on_random_blocks(n_cols):
    """Every code, mixed and subnormal scales, all-(-12) blocks, outlying activations."""
    rng = np.random.default_rng(9 + n_cols)
    w_raw = random_blocks(rng, 6 * n_cols // 32).reshape(6, -1)
    a = (rng.standard_normal(n_cols) * np.where(rng.random(n_cols) < 0.05, 100, 1)).astype(np.float32)
    exact, scale = exact_dot(w_raw.reshape(-1), 6, a)
    check_vec_dot(w_raw, "MXFP4", n_cols, a, exact, scale)


@pytest.mark.parametrize("level", [lv for lv in LEVELS if lv in ("neon", "neon_dot")] or
                         [pytest.param("neon", marks=pytest.mark.skip(reason="no NEON level on this CPU"))])
def test_neon_levels_give_the_reference_bits(level):
    """The NEON kernels promise the reference's bits (exact integer sums, the
    reference's float step); at the x86 levels only the summation order may differ."""
    rng = np.random.default_rng(12)
    for n_cols in (32, 288, 2048):
        w_raw = random_blocks(rng, 5 * n_cols // 32).reshape(5, -1)
        a = rng.standard_normal(n_cols).astype(np.float32)
        ref = _engine.vec_dot_rows(w_raw, "MXFP4", n_cols, a, "ref")
        assert same_bits(_engine.vec_dot_rows(w_raw, "MXFP4", n_cols, a, level), ref)
        x = rng.standard_normal((3, n_cols)).astype(np.float32)
        assert same_bits(_engine.matmul(w_raw, "MXFP4", 5, n_cols, x, 2, level),
                         _engine.matmul(w_raw, "MXFP4", 5, n_cols, x, 1, "ref"))


@pytest.mark.parametrize("n_rows,n_cols,n_tok", [(1, 32, 1), (3, 96, 3), (17, 256, 17), (33, 768, 67), (66, 512, 1),
                                                 (13, 2880, 5), (20, 64, 9)])
def test_matmul_odd_shapes(n_rows, n_cols, n_tok):
    rng = np.random.default_rng(n_rows * 7919 + n_cols)
    w = rng.standard_normal((n_rows, n_cols)).astype(np.float32)
    x = rng.standard_normal((n_tok, n_cols)).astype(np.float32)
    w_raw = _engine.quantize(w, "MXFP4")
    w64 = _engine.dequantize(w_raw, "MXFP4", [n_rows, n_cols]).astype(np.float64)
    check_matmul(w_raw, "MXFP4", n_rows, n_cols, x, w64, "Q8_0")


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("n_cols", [512, 736])
def test_rows_do_not_depend_on_the_batch(level, n_cols):
    """A row's product is the same bits alone (mat-vec: vec_dot and the tile
    with one column), in small batches (matvec_cols) and in mat-mat tiles, on
    one or two threads (tests/test_matmul_batching.py's promise); 736 = 23
    blocks, an odd count."""
    rng = np.random.default_rng(n_cols)
    w = _engine.quantize(rng.standard_normal((37, n_cols)).astype(np.float32), "MXFP4")
    x = rng.standard_normal((11, n_cols)).astype(np.float32) * 2
    full = _engine.matmul(w, "MXFP4", 37, n_cols, x, 2, level)
    for n in (1, 2, 3, 4, 5, 8):
        parts = np.concatenate([_engine.matmul(w, "MXFP4", 37, n_cols, x[i:i + n], 2, level) for i in range(0, 11, n)])
        np.testing.assert_array_equal(parts, full, err_msg=f"{level} batches of {n}")
    np.testing.assert_array_equal(_engine.matmul(w, "MXFP4", 37, n_cols, x, 1, level), full)
    for t in (0, 6):
        assert same_bits(_engine.vec_dot_rows(w, "MXFP4", n_cols, x[t], level), full[t])


@pytest.mark.parametrize("n_tok,k,n_expert", [(1, 4, 8), (40, 2, 8)])
def test_expert_products_equal_the_dense_driver(n_tok, k, n_expert):
    """gpt-oss's path: MXFP4 experts through moe_matmul give the dense
    driver's bits per expert at every level, and the reference's values."""
    rng = np.random.default_rng(n_tok)
    rows, cols = 64, 2880
    raw = _engine.quantize((rng.standard_normal((n_expert * rows, cols)) / 50).astype(np.float32), "MXFP4")
    x = rng.standard_normal((n_tok, cols)).astype(np.float32)
    ids = np.stack([rng.choice(n_expert, k, replace=False) for _ in range(n_tok)]).astype(np.int32)
    per = raw.reshape(n_expert, -1)
    flat = ids.reshape(-1)
    for level in LEVELS:
        want = np.zeros((n_tok * k, rows), np.float32)
        for e in np.unique(flat):
            slots = np.nonzero(flat == e)[0]
            want[slots] = _engine.matmul(per[e], "MXFP4", rows, cols, x[slots // k], 1, level)
        got = _engine.ops.moe_matmul(raw, "MXFP4", n_expert, rows, cols, x, ids, n_threads=2, level=level)
        np.testing.assert_array_equal(got, want, err_msg=level)
    ref = _engine.ops.moe_matmul(raw, "MXFP4", n_expert, rows, cols, x, ids, level="ref")
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()
