"""The engine's promise behind prefill == step-by-step decoding, speculative
decoding and prompt reuse: a row's product with a weight matrix is the same,
bit for bit, whether the row is multiplied alone (mat-vec), in a batch of
any size (mat-mat tiles) or on any number of threads, for every weight type
and every kernel level."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from llamapy import _engine as E

TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
         "IQ4_NL", "IQ4_XS", "MXFP4", "TQ1_0", "TQ2_0"]
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
    for n in (1, 2, 3, 4, 5, 8):  # 2-3 (Q6_K: to 8) take the small-batch path (matvec_batch_max)
        parts = np.concatenate([E.matmul(w, t, 37, 512, x[i:i + n], 2, level) for i in range(0, 11, n)])
        np.testing.assert_array_equal(parts, full, err_msg=f"{t} {level} batches of {n}")
    np.testing.assert_array_equal(E.matmul(w, t, 37, 512, x, 1, level), full, err_msg=f"{t} {level} 1 thread")


# Row lengths with blocks past the kernels' groups of 8 (Gemma's 640 = 20
# blocks of 32; 736 = 23), or super-blocks past pairs (1280 = 5 of 256).
TAIL_COLS = {t: (1280,) if E.type_info(t)["block_size"] == 256 else (640, 736) for t in TYPES}
# Q8_0's AVX2 panels walk rows longer than 128 blocks in stretches (4160 = 130 blocks)
TAIL_COLS["Q8_0"] += (4160,)


# Types whose panel call takes more than 16 rows (type_traits::panel_rows: the
# packed float panels, Q8_0 at the AVX2 level in sub-panels of 16): 150 rows are
# two full calls of 64 and a partial one, with partial sub-panels.
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("t", ["F32", "F16", "Q8_0", "Q4_K"])
def test_rows_past_one_panel_call_do_not_depend_on_the_batch(t, level):
    rng = np.random.default_rng(13)
    w = E.quantize(rng.standard_normal((150, 512)).astype(np.float32), t)
    x = rng.standard_normal((21, 512)).astype(np.float32) * 2
    full = E.matmul(w, t, 150, 512, x, 2, level)
    for n in (1, 4, 9):
        parts = np.concatenate([E.matmul(w, t, 150, 512, x[i:i + n], 2, level) for i in range(0, 21, n)])
        np.testing.assert_array_equal(parts, full, err_msg=f"{t} {level} batches of {n}")
    np.testing.assert_array_equal(E.matmul(w, t, 150, 512, x, 1, level), full, err_msg=f"{t} {level} 1 thread")
    ref = E.matmul(w, t, 150, 512, x, 1, "ref")
    np.testing.assert_allclose(full, ref, rtol=2e-3, atol=2e-3 * float(np.abs(ref).max()))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("t", [t for t in TYPES if not t.startswith(("F", "BF"))])
def test_rows_with_tail_blocks_do_not_depend_on_the_batch(t, level):
    rng = np.random.default_rng(11)
    for n_cols in TAIL_COLS[t]:
        w = E.quantize(rng.standard_normal((37, n_cols)).astype(np.float32), t)
        x = rng.standard_normal((11, n_cols)).astype(np.float32) * 2
        full = E.matmul(w, t, 37, n_cols, x, 2, level)
        for n in (1, 2, 3, 4, 5, 8):
            parts = np.concatenate([E.matmul(w, t, 37, n_cols, x[i:i + n], 2, level) for i in range(0, 11, n)])
            np.testing.assert_array_equal(parts, full, err_msg=f"{t} {level} {n_cols} columns, batches of {n}")
        for i in (0, 10):
            np.testing.assert_array_equal(E.vec_dot_rows(w, t, n_cols, x[i], level), full[i],
                                          err_msg=f"{t} {level} {n_cols} columns, vec_dot row {i}")
        ref = E.matmul(w, t, 37, n_cols, x, 1, "ref")
        np.testing.assert_allclose(full, ref, rtol=2e-3, atol=2e-3 * float(np.abs(ref).max()))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("t", ["F32", "F16"])
@pytest.mark.parametrize("n_cols", [1, 3, 8, 17, 44, 300, 1024, 1100, 1543])
def test_float_rows_of_any_length(t, level, n_cols):
    # the float tiles finish a row with a zero-padded partial vector: still
    # batch invariant, equal to vec_dot, and within float rounding of the
    # double-precision reference. 8 and 7 activation rows are one packed
    # activation tile (with padding) at AVX-512, a whole one and a partial
    # one at AVX2.
    rng = np.random.default_rng(n_cols)
    w = E.quantize(rng.standard_normal((9, n_cols)).astype(np.float32), t)
    x = rng.standard_normal((8, n_cols)).astype(np.float32)
    full = E.matmul(w, t, 9, n_cols, x, 2, level)
    np.testing.assert_array_equal(E.matmul(w, t, 9, n_cols, x[:7], 1, level), full[:7])
    for i in range(8):
        np.testing.assert_array_equal(E.matmul(w, t, 9, n_cols, x[i:i + 1], 1, level)[0], full[i])
        np.testing.assert_array_equal(E.vec_dot_rows(w, t, n_cols, x[i], level), full[i])
    ref = E.matmul(w, t, 9, n_cols, x, 1, "ref")
    assert np.abs(full - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("t", ["F32", "F16"])
@pytest.mark.parametrize("n_rows,n_cols,n_tok", [(19, 257, 131), (6, 40, 11), (35, 513, 17), (3, 16, 5),
                                                 (17, 1000, 7), (150, 300, 9), (67, 257, 133), (21, 1030, 263)])
def test_float_panels_of_odd_shapes(t, level, n_rows, n_cols, n_tok):
    # The packed float mat-mat (x86 levels): register tiles of 32 weight rows
    # x 12 activation rows at AVX-512 (16 x 6 at AVX2) and their edges (rows
    # past a tile, 1-11 columns in the last activation tile), a partial last
    # step of 16 / 8 elements, 64 weight rows per job, activation tiles split
    # between jobs where there are few row panels:
    # every output has vec_dot's bits and the reference's value.
    rng = np.random.default_rng(n_rows * 7 + n_cols)
    w = E.quantize(rng.standard_normal((n_rows, n_cols)).astype(np.float32), t)
    x = rng.standard_normal((n_tok, n_cols)).astype(np.float32)
    full = E.matmul(w, t, n_rows, n_cols, x, 2, level)
    for i in range(n_tok):
        np.testing.assert_array_equal(E.vec_dot_rows(w, t, n_cols, x[i], level), full[i], err_msg=f"row {i}")
    np.testing.assert_array_equal(E.matmul(w, t, n_rows, n_cols, x[::-1].copy(), 1, level), full[::-1])
    ref = E.matmul(w, t, n_rows, n_cols, x, 1, "ref")
    assert np.abs(full - ref).max() <= 1e-5 * np.abs(ref).max()


def test_avx2_vnni_choice_keeps_the_bits(mats, tmp_path):
    # The AVX2 tiles of Q4_0 / Q5_0 / Q8_0 use AVX-VNNI where the CPU has it
    # (LLAMAPY_AVXVNNI=0: not). Their integer sums are exact either way, so
    # the results must not change (on a CPU without it this compares plain
    # with plain).
    raw, x = mats
    types = ["Q4_0", "Q5_0", "Q8_0"]
    np.savez(tmp_path / "in.npz", x=x, **{t: raw[t] for t in types})
    code = (
        "import sys, numpy as np; from llamapy import _engine as E; d = np.load(sys.argv[1]);"
        f"np.savez(sys.argv[2], **{{t: E.matmul(d[t], t, 37, 512, d['x'], 2, 'avx2') for t in {types!r}}})"
    )
    env = dict(os.environ, LLAMAPY_AVXVNNI="0")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "in.npz"), str(tmp_path / "out.npz")], env=env,
                   check=True)
    plain = np.load(tmp_path / "out.npz")
    for t in types:
        np.testing.assert_array_equal(plain[t], E.matmul(raw[t], t, 37, 512, x, 2, "avx2"), err_msg=t)


# Encoders ask for matmul_kernels::throughput: a type's throughput panel (Q8_0) or one-chain
# packed product (F32 / F16), both at the AVX-512 level, or the packed F32 product on
# dequantized weights (Q8_0 at the AVX2 level without AVX-VNNI), for every batch size. Their sums run in
# another order than the consistent kernels', so the bits differ from theirs, but a row's result
# still does not depend on the batch or the threads, and it is as close to the reference; where
# the type has neither (other levels), throughput is the consistent kernels.
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("n_cols", [384, 512, 736, 1536])
@pytest.mark.parametrize("t", ["Q8_0", "F32", "F16"])
def test_throughput_kernels_do_not_depend_on_the_batch(level, n_cols, t):
    rng = np.random.default_rng(17)
    w = E.quantize(rng.standard_normal((37, n_cols)).astype(np.float32), t)
    x = rng.standard_normal((21, n_cols)).astype(np.float32) * 2
    full = E.matmul(w, t, 37, n_cols, x, 2, level, kernels="throughput")
    for n in (1, 2, 3, 4, 5, 8, 13):
        parts = np.concatenate([E.matmul(w, t, 37, n_cols, x[i:i + n], 2, level, kernels="throughput")
                                for i in range(0, 21, n)])
        np.testing.assert_array_equal(parts, full, err_msg=f"{level} {n_cols} batches of {n}")
    np.testing.assert_array_equal(E.matmul(w, t, 37, n_cols, x, 1, level, kernels="throughput"), full)
    ref = E.matmul(w, t, 37, n_cols, x, 1, "ref")
    consistent = E.matmul(w, t, 37, n_cols, x, 2, level)
    # as close to the reference as the consistent kernels (float rounding only), or, for a
    # product that keeps the activations in F32 (Q8_0 at the AVX2 level without AVX-VNNI), to
    # the exact product of the stored weights
    exact = x.astype(np.float64) @ E.dequantize(w, t, (37, n_cols)).astype(np.float64).T
    assert (np.abs(full - ref).max() <= max(2 * np.abs(consistent - ref).max(), 1e-5 * np.abs(ref).max())
            or np.abs(full - exact).max() <= 1e-5 * np.abs(exact).max())
    info = E.type_info(t, level)
    if not info["has_throughput_panel"] and not info["has_throughput_packed"]:
        np.testing.assert_array_equal(full, consistent)


def test_avx2_q8_0_throughput_is_the_f32_product_of_its_weights(tmp_path):
    """At the AVX2 level without AVX-VNNI (LLAMAPY_AVXVNNI=0), an encoder's Q8_0 product is the
    packed F32 one on the dequantized weights (exact: d · q needs 19 bits) and F32 activations:
    the same bits as the F32 product of those weights, closer to the reference than the int8
    kernels (which round the activations to 8 bits)."""
    if E.type_info("Q8_0", "avx2")["kernel_isa"] != "avx2":
        pytest.skip("no AVX2 level here (the CPU's, or LLAMAPY_ISA caps it)")
    rng = np.random.default_rng(5)
    w = E.quantize(rng.standard_normal((70, 768)).astype(np.float32), "Q8_0")
    wf = E.dequantize(w, "Q8_0", (70, 768))
    x = rng.standard_normal((29, 768)).astype(np.float32)
    np.savez(tmp_path / "in.npz", w=w, wf=wf, x=x)
    code = (
        "import sys, numpy as np; from llamapy import _engine as E; d = np.load(sys.argv[1]);"
        "np.savez(sys.argv[2], has=E.type_info('Q8_0', 'avx2')['has_throughput_packed'],"
        " q8=E.matmul(d['w'], 'Q8_0', 70, 768, d['x'], 2, 'avx2', kernels='throughput'),"
        " f32=E.matmul(d['wf'].ravel().view(np.uint8), 'F32', 70, 768, d['x'], 2, 'avx2', kernels='throughput'),"
        " int8=E.matmul(d['w'], 'Q8_0', 70, 768, d['x'], 2, 'avx2'))"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
                   env=dict(os.environ, LLAMAPY_AVXVNNI="0"), check=True)
    out = np.load(tmp_path / "out.npz")
    assert bool(out["has"])
    np.testing.assert_array_equal(out["q8"], out["f32"])
    ref = x.astype(np.float64) @ wf.astype(np.float64).T
    assert np.abs(out["q8"] - ref).max() < np.abs(out["int8"] - ref).max() / 10


def test_kernels_are_named():
    w = E.quantize(np.ones((4, 32), dtype=np.float32), "Q8_0")
    with pytest.raises(ValueError, match="consistent"):
        E.matmul(w, "Q8_0", 4, 32, np.ones((2, 32), dtype=np.float32), 1, "best", kernels="fast")
