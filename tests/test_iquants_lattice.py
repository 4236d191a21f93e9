"""The grid-based i-quants (vendor/engine/quants/iq_lattice.*): IQ2_XXS, IQ2_XS, IQ2_S,
IQ3_XXS, IQ3_S, IQ1_S and IQ1_M, read and multiplied against Q8_K activations.

Writing them is checked against llama.cpp's quantizer elsewhere (tests/test_iq_lattice_write.py,
tests/test_iq3_quantize.py); the checks here run on random blocks, which are all valid once
their fp16 scale is finite (every index, sign and sub-scale pattern is a legal one):
- the committed lattice tables equal what tools/gen_iq_grids.py writes from the installed
  gguf package;
- dequantization equals gguf-py's bit for bit;
- every ISA level's dot product agrees with the reference, which agrees with float64 on
  the dequantized values; the matrix driver agrees at odd shapes and thread counts.
Logits of whole models against llama.cpp: tests/test_iq_lattice_llama_cpp.py.
"""
from __future__ import annotations

import pathlib

import gguf
import numpy as np
import pytest

from llamapy import _engine
from quant_checks import (IQ_BLOCK_BYTES, IQ_LATTICE_TYPES, activation_roundtrip, check_matmul, check_vec_dot,
                          load_tool, random_iq_blocks, same_bits)

ROOT = pathlib.Path(__file__).resolve().parent.parent
TYPES = IQ_LATTICE_TYPES


def gguf_dequantize(raw: np.ndarray, qtype: str) -> np.ndarray:
    return gguf.quants.dequantize(raw.reshape(-1), gguf.GGMLQuantizationType[qtype]).reshape(-1)


def test_grid_tables_are_generated_from_gguf():
    gen = load_tool("gen_iq_grids")
    committed = (ROOT / "vendor" / "engine" / "quants" / "iq_grids.inc").read_text(encoding="utf-8")
    assert committed == gen.render(), "iq_grids.inc is stale: run python3 tools/gen_iq_grids.py"
    shaders = (ROOT / "vendor" / "engine" / "vulkan" / "shaders" / "iq_grids.glsl").read_text(encoding="utf-8")
    assert shaders == gen.render_glsl(), "iq_grids.glsl is stale: run python3 tools/gen_iq_grids.py"


@pytest.mark.parametrize("qtype", TYPES)
def test_dequantize_random_blocks_bit_exact(qtype):
    rng = np.random.default_rng(TYPES.index(qtype) + 1)
    raw = random_iq_blocks(rng, qtype, 300)
    got = _engine.dequantize(raw, qtype, [300 * 256])
    assert same_bits(got, gguf_dequantize(raw, qtype))


@pytest.mark.parametrize("qtype", TYPES)
def test_dequantize_extreme_scales(qtype):
    """The largest and smallest (subnormal) fp16 scales, and zero: still gguf-py's bits."""
    rng = np.random.default_rng(40 + TYPES.index(qtype))
    raw = random_iq_blocks(rng, qtype, 8)
    for i, h in enumerate([0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0000, 0x03FF, 0x3C00, 0xBC00]):
        one = np.array([h], np.uint16)
        if qtype == "IQ1_M":
            words = raw[i, 48:56].copy().view(np.uint16)
            for k in range(4):
                words[k] = (words[k] & 0x0FFF) | (((int(h) >> (4 * k)) & 0xF) << 12)
            raw[i, 48:56] = words.view(np.uint8)
        else:
            raw[i, 0:2] = one.view(np.uint8)
    got = _engine.dequantize(raw, qtype, [8 * 256])
    assert same_bits(got, gguf_dequantize(raw, qtype))


def exact_dot(w_raw, qtype, n_rows, a):
    w64 = gguf_dequantize(w_raw, qtype).reshape(n_rows, -1).astype(np.float64)
    a64 = activation_roundtrip(a[None], "Q8_K")[0].astype(np.float64)
    return w64 @ a64, np.abs(w64) @ np.abs(a64)


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("n_cols", [256, 512, 2304, 4096])
def test_vec_dot_levels(qtype, n_cols):
    rng = np.random.default_rng(n_cols + 97 * TYPES.index(qtype))
    n_rows = 7
    w_raw = random_iq_blocks(rng, qtype, n_rows * n_cols // 256).reshape(n_rows, -1)
    # a few large activations: the Q8_K scale follows the largest, the rest stay small
    a = (rng.standard_normal(n_cols) * np.where(rng.random(n_cols) < 0.05, 30, 1)).astype(np.float32)
    exact, scale = exact_dot(w_raw, qtype, n_rows, a)
    check_vec_dot(w_raw, qtype, n_cols, a, exact, scale)


@pytest.mark.parametrize("qtype", TYPES)
def test_vec_dot_extreme_operands(qtype):
    """Saturating inputs for the int16 pair sums: activations at ±127 everywhere, with the
    largest grid values and sub-scales the random blocks hold."""
    rng = np.random.default_rng(77 + TYPES.index(qtype))
    n_cols = 1024
    w_raw = random_iq_blocks(rng, qtype, 3 * n_cols // 256).reshape(3, -1)
    for a in [np.full(n_cols, 1.0, np.float32), np.where(rng.random(n_cols) < 0.5, -1.0, 1.0).astype(np.float32)]:
        exact, scale = exact_dot(w_raw, qtype, 3, a)
        check_vec_dot(w_raw, qtype, n_cols, a, exact, scale)


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("n_rows,n_cols,n_tok", [(1, 256, 1), (3, 512, 3), (17, 256, 17), (33, 768, 67), (66, 512, 1),
                                                 (13, 2304, 5), (5, 256, 2)])
def test_matmul_odd_shapes(qtype, n_rows, n_cols, n_tok):
    rng = np.random.default_rng(n_rows * 7919 + n_cols + TYPES.index(qtype))
    w_raw = random_iq_blocks(rng, qtype, n_rows * n_cols // 256).reshape(-1)
    x = rng.standard_normal((n_tok, n_cols)).astype(np.float32)
    w64 = _engine.dequantize(w_raw, qtype, [n_rows, n_cols]).astype(np.float64)
    check_matmul(w_raw, qtype, n_rows, n_cols, x, w64, "Q8_K")


# Every one is written too: the writing flags are checked with the writers
# (tests/test_iq_lattice_write.py, tests/test_iq3_quantize.py).
@pytest.mark.parametrize("qtype", TYPES)
def test_type_info_reads(qtype):
    info = _engine.type_info(qtype)
    assert (info["block_size"], info["type_size"]) == (256, IQ_BLOCK_BYTES[qtype])
    assert info["can_dequantize"] and info["has_matmul"]
    assert info["vec_dot_type"] == "Q8_K"
    assert info["can_quantize_weighted"]


def test_truncated_data_is_refused():
    raw = random_iq_blocks(np.random.default_rng(5), "IQ2_XXS", 2).reshape(-1)[:-1]
    with pytest.raises(ValueError):
        _engine.dequantize(raw, "IQ2_XXS", [512])
    with pytest.raises(ValueError):
        _engine.dequantize(random_iq_blocks(np.random.default_rng(5), "IQ3_S", 1), "IQ3_S", [128])


@pytest.mark.parametrize("qtype", ["IQ2_XXS", "IQ3_S", "IQ1_M"])
@pytest.mark.parametrize("n_tok,k,n_expert", [(1, 8, 32), (40, 2, 8)])
def test_expert_products_equal_the_dense_driver(qtype, n_tok, k, n_expert):
    """Mixture-of-experts weights in these types (as many IQ1/IQ2 files of large MoE models
    hold them): the expert matmul gives the dense driver's bits, expert by expert."""
    from quant_checks import LEVELS

    rng = np.random.default_rng(n_tok + TYPES.index(qtype))
    rows, cols = 48, 512
    raw = random_iq_blocks(rng, qtype, n_expert * rows * cols // 256).reshape(-1)
    x = rng.standard_normal((n_tok, cols)).astype(np.float32)
    ids = np.stack([rng.choice(n_expert, k, replace=False) for _ in range(n_tok)]).astype(np.int32)
    per = raw.reshape(n_expert, -1)
    flat = ids.reshape(-1)
    for level in LEVELS:
        want = np.zeros((len(flat), rows), np.float32)
        for e in range(n_expert):
            slots = np.nonzero(flat == e)[0]
            if len(slots):
                want[slots] = _engine.matmul(per[e], qtype, rows, cols, x[slots // k], n_threads=1, level=level)
        for n_threads in (1, 2):
            got = _engine.ops.moe_matmul(raw, qtype, n_expert, rows, cols, x, ids, n_threads=n_threads, level=level)
            np.testing.assert_array_equal(got.reshape(len(flat), rows), want, err_msg=f"{qtype} {level} {n_threads}")
