"""The k-quant family (vendor/engine/quants/kquants.cpp): Q2_K, Q3_K, Q4_K,
Q5_K, Q6_K weights and the Q8_K activation format.

- dequantization equals gguf-py's bit for bit (random blocks, real tensors);
- the reference quantizers reach the error budget of each type and behave on
  zero, constant, tiny and huge rows;
- Q8_K's fast quantizer writes the reference's bytes;
- every dot-product kernel level agrees with the scalar reference, which
  agrees with a float64 product of the dequantized operands; the matrix
  driver (mat-vec and the 4×4 tiles) agrees at odd shapes and thread counts.
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest

from llamapy import _engine

K_TYPES = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
BLOCK_BYTES = {"Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210, "Q8_K": 292}
# byte offsets of the fp16 scale fields (d, dmin) in each block
HALF_FIELDS = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
LEVELS = list(_engine.system_info()["cpu_isas"])  # "scalar", then what this CPU and build support
ACTIVE = _engine.system_info()["active_isa"]  # LEVELS[-1], or lower under LLAMAPY_ISA
Q8K_DTYPE = np.dtype([("d", "<f4"), ("qs", "i1", 256), ("bsums", "<i2", 16)])

# Normalized RMSE (rms error / std) of the reference quantizers on Gaussian
# data, 16 rows of 4096. Measured: Q2_K 0.295, Q3_K 0.151, Q4_K 0.0715,
# Q5_K 0.0366, Q6_K 0.0177; the bounds leave ~10% margin.
NRMSE_BOUND = {"Q2_K": 0.33, "Q3_K": 0.17, "Q4_K": 0.08, "Q5_K": 0.041, "Q6_K": 0.020}


def set_halves(raw, qtype, values):
    """Writes fp16 `values` (one per block, or one for all) into the scale fields."""
    for off in HALF_FIELDS[qtype]:
        h = np.broadcast_to(np.asarray(values, np.float16), (raw.shape[0],)).copy()
        raw[:, off:off + 2] = h.view(np.uint8).reshape(-1, 2)
    return raw


def random_blocks(rng, qtype, n_blocks, halves=None):
    """Random block bytes with finite fp16 scale fields (random bytes would
    put NaN and inf there); `halves` overrides the scale values."""
    raw = rng.integers(0, 256, size=(n_blocks, BLOCK_BYTES[qtype]), dtype=np.uint8)
    if halves is None:
        for off in HALF_FIELDS[qtype]:
            set_halves_at = (rng.standard_normal(n_blocks) * 0.02).astype(np.float16)
            raw[:, off:off + 2] = set_halves_at.view(np.uint8).reshape(-1, 2)
        return raw
    return set_halves(raw, qtype, halves)


def dequant(raw, qtype, shape):
    out = _engine.dequantize(np.ascontiguousarray(raw), qtype, list(shape))
    assert out.dtype == np.float32 and out.shape == tuple(shape)
    return out


def q8k_dequant(x):
    """x quantized to Q8_K (reference) and back, as float64."""
    x = np.atleast_2d(np.asarray(x, np.float32))
    return dequant(_engine.quantize_ref(x, "Q8_K"), "Q8_K", x.shape).astype(np.float64)


# ---------------------------------------------------------------------------
# Dequantization
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("qtype", K_TYPES)
def test_dequantize_matches_gguf_bit_for_bit(qtype):
    rng = np.random.default_rng(1)
    extremes = np.array([0.0, -0.0, 6e-8, -6e-8, 1e-5, 65504.0, -65504.0, 1.0], np.float16)
    raws = [random_blocks(rng, qtype, 512),
            random_blocks(rng, qtype, 8, halves=extremes),
            random_blocks(rng, qtype, 8, halves=rng.permutation(extremes))]
    for raw in raws:
        ours = dequant(raw, qtype, (raw.shape[0] * 256,))
        ref = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[qtype]).reshape(-1)
        np.testing.assert_array_equal(ours.view(np.uint32), ref.view(np.uint32))


def test_dequantize_keeps_leading_dimensions():
    raw = random_blocks(np.random.default_rng(2), "Q4_K", 6)
    flat = dequant(raw, "Q4_K", (6 * 256,))
    np.testing.assert_array_equal(dequant(raw, "Q4_K", (3, 512)), flat.reshape(3, 512))


@pytest.mark.model
def test_real_tensors_dequantize_like_gguf_and_dot_like_float64(gemma_path):
    from llamapy import GGUFFile

    seen = {}
    with GGUFFile(gemma_path) as f:
        for t in f.tensors:
            if t.type_name not in K_TYPES or seen.get(t.type_name, 0) >= 3:
                continue
            seen[t.type_name] = seen.get(t.type_name, 0) + 1
            n_cols = t.ne[0]
            raw = np.array(f.tensor(t.name)[:48])  # (rows, row bytes); 48 rows are plenty
            ours = dequant(raw, t.type_name, (raw.shape[0], n_cols))
            ref = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(t.type))
            np.testing.assert_array_equal(ours.view(np.uint32), ref.view(np.uint32), err_msg=t.name)
            a = np.random.default_rng(3).standard_normal(n_cols).astype(np.float32)
            ad = q8k_dequant(a)[0]
            exact = ours.astype(np.float64) @ ad
            bound = 4e-6 * (np.abs(ours).astype(np.float64) @ np.abs(ad))
            for level in ["ref"] + LEVELS:
                got = _engine.vec_dot_rows(raw, t.type_name, n_cols, a, level)
                assert np.all(np.abs(got - exact) <= bound), (t.name, level)
    assert {"Q4_K", "Q6_K"} <= set(seen), seen  # Q4_K_M holds both


# ---------------------------------------------------------------------------
# Reference quantization
# ---------------------------------------------------------------------------
def nrmse(qtype, x):
    q = _engine.quantize_ref(x, qtype)
    y = dequant(q, qtype, x.shape)
    assert np.all(np.isfinite(y))
    x64 = x.astype(np.float64)
    return float(np.sqrt(np.mean((y - x64) ** 2)) / x64.std()), q, y


@pytest.mark.parametrize("qtype", K_TYPES)
def test_quantize_error_budget_on_gaussian_rows(qtype):
    x = np.random.default_rng(4).standard_normal((16, 4096)).astype(np.float32)
    err, q, _ = nrmse(qtype, x)
    assert err < NRMSE_BOUND[qtype]
    assert q.shape == (16, 16 * BLOCK_BYTES[qtype]) and q.dtype == np.uint8
    # the fast path of the weight types is the reference itself
    np.testing.assert_array_equal(_engine.quantize(x, qtype), q)


@pytest.mark.parametrize("qtype", K_TYPES)
def test_quantize_scales_are_sane(qtype):
    x = (np.random.default_rng(5).standard_normal((8, 1024)) * 3).astype(np.float32)
    blocks = _engine.quantize_ref(x, qtype).reshape(-1, BLOCK_BYTES[qtype])
    halves = [blocks[:, o:o + 2].copy().view(np.float16).astype(np.float32)[:, 0] for o in HALF_FIELDS[qtype]]
    assert all(np.all(np.isfinite(h)) and np.all(h != 0) for h in halves)
    if qtype in ("Q2_K", "Q4_K", "Q5_K"):
        assert all(np.all(h > 0) for h in halves)  # scale and min factors are positive
    # the largest sub-block scale uses the top of the scale field's range
    if qtype == "Q2_K":
        assert np.all((blocks[:, :16] & 0xF).max(axis=1) == 15)
    elif qtype in ("Q4_K", "Q5_K"):
        sc, mn = gguf.quants.Q4_K.get_scale_min(blocks[:, 4:16].copy())
        assert np.all(sc.max(axis=1) == 63) and np.all(mn.max(axis=1) <= 63)
    elif qtype == "Q6_K":
        assert np.all(blocks[:, 192:208].view(np.int8).min(axis=1) == -128)


# How far a second quantize/dequantize round trip moves the weights, relative
# to the first round trip's error. Q2_K, Q4_K and Q6_K land on a fixed point
# (measured 0); Q5_K nearly (0.05); Q3_K's x²-weighted search does not (0.23).
REQUANT_DRIFT = {"Q2_K": 0.0, "Q3_K": 0.35, "Q4_K": 0.0, "Q5_K": 0.1, "Q6_K": 0.0}


@pytest.mark.parametrize("qtype", K_TYPES)
def test_requantizing_dequantized_weights_is_stable(qtype):
    x = np.random.default_rng(6).standard_normal((8, 2048)).astype(np.float32)
    _, _, y1 = nrmse(qtype, x)
    _, _, y2 = nrmse(qtype, y1)
    drift = np.sqrt(np.mean((y2.astype(np.float64) - y1) ** 2))
    first = np.sqrt(np.mean((y1.astype(np.float64) - x) ** 2))
    assert drift <= REQUANT_DRIFT[qtype] * first


@pytest.mark.parametrize("qtype", K_TYPES)
def test_quantize_zero_and_constant_rows(qtype):
    zero = np.zeros((2, 512), np.float32)
    assert np.all(dequant(_engine.quantize_ref(zero, qtype), qtype, zero.shape) == 0)
    # one quant level times fp16 scales reproduce a constant to fp16 precision
    # while the block scale is a normal half; small constants get subnormal
    # block scales (Q6_K's d is max/4096), which are coarser
    for c, rtol in ((1.0, 2e-3), (-1.0, 2e-3), (3.25, 2e-3), (-0.5, 2e-3), (100.0, 2e-3), (-1e-3, 3e-2)):
        x = np.full((1, 512), c, np.float32)
        y = dequant(_engine.quantize_ref(x, qtype), qtype, x.shape)
        np.testing.assert_allclose(y, x, rtol=rtol, err_msg=f"{qtype} constant {c}")
    # a row that is zero except for one value
    x = np.zeros((1, 256), np.float32)
    x[0, 77] = -2.5
    y = dequant(_engine.quantize_ref(x, qtype), qtype, x.shape)
    assert abs(y[0, 77] + 2.5) < 0.02 and np.all(np.abs(np.delete(y, 77)) < 0.02)


@pytest.mark.parametrize("qtype", K_TYPES)
def test_quantize_tiny_and_huge_magnitudes(qtype):
    base = np.random.default_rng(7).standard_normal((4, 1024)).astype(np.float32)
    # scales that fit fp16 comfortably: same relative error as at unit scale
    for scale in (1e-2, 1e2, 1e4):
        err, _, _ = nrmse(qtype, base * np.float32(scale))
        assert err < NRMSE_BOUND[qtype], scale
    # Below ~1e-4 the fp16 block scales go subnormal and then to zero. The
    # error grows (llama.cpp's algorithm, which we follow, rounds d and dmin
    # independently), but values stay finite and within the input's range.
    for scale in (1e-5, 1e-6, 3e-7, 1e-9, 1e-30, 1e-38):
        x = base * np.float32(scale)
        y = dequant(_engine.quantize_ref(x, qtype), qtype, x.shape)
        assert np.all(np.isfinite(y)) and np.abs(y).max() <= 1.25 * np.abs(x).max(), scale


def test_quantize_rejects_bad_rows():
    with pytest.raises(ValueError):
        _engine.quantize_ref(np.zeros((2, 100), np.float32), "Q4_K")


# ---------------------------------------------------------------------------
# Q8_K activations
# ---------------------------------------------------------------------------
def q8k_cases():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((6, 1024)).astype(np.float32)
    x[1, :256] = 0  # an all-zero block
    x[2, 300] = 7.0  # a block whose max is positive ...
    x[2, 400] = -7.0  # ... and ties with a negative value later (the first wins)
    x[3, 600] = -7.0
    x[3, 700] = 7.0
    x[4, 256:512] = 1.0  # constant blocks: every quant is ±127
    x[4, 512:768] = -1.0
    x[5] *= np.float32(1e-30)  # subnormal products
    return x


def test_q8_k_fast_quantizer_writes_reference_bytes():
    x = q8k_cases()
    np.testing.assert_array_equal(_engine.quantize(x, "Q8_K"), _engine.quantize_ref(x, "Q8_K"))


def test_q8_k_reference_semantics():
    x = q8k_cases()
    b = _engine.quantize_ref(x, "Q8_K").reshape(-1).view(Q8K_DTYPE)
    xb = x.reshape(-1, 256).astype(np.float64)
    np.testing.assert_array_equal(b["bsums"], b["qs"].astype(np.int32).reshape(-1, 16, 16).sum(axis=2))
    assert np.all(b["qs"] >= -127)
    nz = np.abs(xb).max(axis=1) > 0
    assert np.all(b["d"][~nz] == 0) and np.all(b["qs"][~nz] == 0)
    # the signed value of largest magnitude (first on ties) maps to -127
    first = np.abs(xb).argmax(axis=1)
    assert np.all(b["qs"][nz, first[nz]] == -127)
    np.testing.assert_allclose(b["d"][nz], -xb[nz, first[nz]] / 127, rtol=1e-6)
    assert b["d"][2 * 4 + 1] < 0 and b["d"][3 * 4 + 2] > 0  # the tie rows: +7 first, -7 first
    err = np.abs(dequant(_engine.quantize_ref(x, "Q8_K"), "Q8_K", x.shape) - x)
    assert np.all(err.reshape(-1, 256) <= np.abs(b["d"])[:, None] * 0.5001 + 1e-37)


def one_hot_q4_k_rows(n_cols):
    """Q4_K rows whose weights are e_k − 1 (row k): d = dmin = 1, every scale
    and min 1, one quant set to 1. Their dot product with Q8_K activations is
    a_k − Σ a, which shows every quant, d and bsum of the Q8_K row the kernel
    was handed."""
    nb = n_cols // 256
    blocks = np.zeros((n_cols, nb, BLOCK_BYTES["Q4_K"]), np.uint8)
    blocks[:, :, 0:4] = np.array([1.0, 1.0], np.float16).view(np.uint8)
    blocks[:, :, 4:12] = 0x01  # scales 0-3 and mins 0-3 = 1
    blocks[:, :, 12:16] = 0x11  # scales 4-7 and mins 4-7 = 1
    for k in range(n_cols):
        e = k % 256
        byte = 16 + 32 * (e // 64) + e % 32
        blocks[k, k // 256, byte] = 0x01 if e % 64 < 32 else 0x10
    return blocks.reshape(-1)


def test_q8_k_quantizer_of_every_level_matches_reference():
    # vec_dot_rows quantizes the activations with the level's own Q8_K
    # quantizer; one-hot weights make any difference in its bytes visible.
    n_cols = 512
    w = one_hot_q4_k_rows(n_cols)
    for a in q8k_cases()[:, :n_cols]:
        b = _engine.quantize_ref(a[None], "Q8_K").reshape(-1).view(Q8K_DTYPE)
        dq = (b["d"][:, None].astype(np.float64) * b["qs"]).reshape(-1)  # the dequantized activations
        expected = dq - dq.sum()
        ref = _engine.vec_dot_rows(w, "Q4_K", n_cols, a, "ref")
        assert np.all(np.abs(ref - expected) <= 1e-3 * np.abs(b["d"]).max() + 1e-30)
        for level in LEVELS:
            got = _engine.vec_dot_rows(w, "Q4_K", n_cols, a, level)
            assert np.all(np.abs(got - ref) <= 0.25 * np.abs(b["d"]).max() + 1e-30), level


# ---------------------------------------------------------------------------
# Dot products and the matrix driver
# ---------------------------------------------------------------------------
def weight_cases(qtype, n_rows, n_cols, rng):
    """Weights from the quantizer, random blocks (every quant value and
    scale), and all-ones bits (the largest quants, where the kernels' 16-bit
    intermediate sums are tightest)."""
    nb = n_rows * n_cols // 256
    quantized = _engine.quantize_ref(rng.standard_normal((n_rows, n_cols)).astype(np.float32), qtype)
    ones = set_halves(np.full((nb, BLOCK_BYTES[qtype]), 0xFF, np.uint8), qtype, 0.01)
    return {"quantized": quantized.reshape(-1), "random": random_blocks(rng, qtype, nb).reshape(-1),
            "ones": ones.reshape(-1)}


def activation_cases(n_cols, rng):
    return {"gaussian": rng.standard_normal(n_cols).astype(np.float32),
            "plus_ones": np.ones(n_cols, np.float32),  # every quant -127
            "signs": np.where(rng.random(n_cols) < 0.5, -1.0, 1.0).astype(np.float32)}


@pytest.mark.parametrize("qtype", K_TYPES)
def test_vec_dot_levels_agree_with_reference_and_float64(qtype):
    rng = np.random.default_rng(9)
    n_rows, n_cols = 12, 768
    for wname, w in weight_cases(qtype, n_rows, n_cols, rng).items():
        wd = dequant(w, qtype, (n_rows, n_cols)).astype(np.float64)
        for aname, a in activation_cases(n_cols, rng).items():
            ad = q8k_dequant(a)[0]
            exact = wd @ ad
            scale = np.abs(wd) @ np.abs(ad)
            ref = _engine.vec_dot_rows(w, qtype, n_cols, a, "ref")
            # the reference: integer sums per block, one float product per block
            assert np.all(np.abs(ref - exact) <= 2e-6 * scale), (wname, aname)
            for level in LEVELS:
                got = _engine.vec_dot_rows(w, qtype, n_cols, a, level)
                assert np.all(np.abs(got - ref) <= 4e-6 * scale), (wname, aname, level)


@pytest.mark.parametrize("qtype", K_TYPES)
def test_type_info_reports_the_kernels(qtype):
    info = _engine.type_info(qtype)
    assert info["vec_dot_type"] == "Q8_K" and info["can_dequantize"] and info["can_quantize"]
    assert info["kernel_isa"] == ACTIVE
    assert info["has_gemm_tile"] == (ACTIVE in ("neon", "neon_dot", "avx512")  # NEON: every k-quant (kquants_neon.cpp)
                                     or (ACTIVE == "avx2" and qtype in ("Q4_K", "Q5_K", "Q6_K")))


@pytest.mark.parametrize("qtype", K_TYPES)
def test_matmul_odd_shapes_and_threads(qtype):
    rng = np.random.default_rng(10)
    n_cols = 512
    for n_rows in (1, 7, 37):
        w = _engine.quantize_ref(rng.standard_normal((n_rows, n_cols)).astype(np.float32), qtype).reshape(-1)
        wd = dequant(w, qtype, (n_rows, n_cols)).astype(np.float64)
        for n_tok in (1, 3, 5, 17, 67):
            x = rng.standard_normal((n_tok, n_cols)).astype(np.float32)
            xd = q8k_dequant(x)
            exact = xd @ wd.T
            bound = 4e-6 * (np.abs(xd) @ np.abs(wd).T)
            runs = [("ref", 1)] + [(lv, 1) for lv in LEVELS] + [("best", 2)]
            for level, n_threads in runs:
                y = _engine.matmul(w, qtype, n_rows, n_cols, x, n_threads=n_threads, level=level)
                assert y.shape == (n_tok, n_rows)
                assert np.all(np.abs(y - exact) <= bound), (n_rows, n_tok, level, n_threads)
