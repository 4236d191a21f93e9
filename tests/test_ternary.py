"""The ternary formats TQ1_0 and TQ2_0 (vendor/engine/quants/ternary.cpp), against Q8_K
activations:
- dequantization equals gguf-py's bit for bit on random blocks (every byte value, bytes
  past TQ1_0's 242 included, as llama.cpp reads them);
- the quantizers give the bytes llama.cpp's reference quantizers gave
  (tests/data/ternary/quantize_ref.npz, recorded by tools/make_ternary_fixtures.py through
  ggml_quantize_chunk: ties at half the scale, zero, constant, tiny and huge blocks), and
  the bytes of the TQ tensors llama-quantize wrote into the model fixture;
- every ISA level's dot product agrees with the reference, which agrees with float64; the
  matrix driver agrees at odd shapes and thread counts;
- a tiny llama quantized to TQ1_0 / TQ2_0 by llama.cpp gives llama.cpp's greedy tokens and
  logits (test_moe_llama_cpp's rules for quantized files).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import gguf
import numpy as np
import pytest

from llamapy import Llama, _engine
from quant_checks import activation_roundtrip, check_matmul, check_vec_dot, same_bits
from test_moe_llama_cpp import WHERE, check_recorded_prompt

DATA = Path(__file__).parent / "data" / "ternary"
TYPES = ["TQ1_0", "TQ2_0"]
BLOCK_BYTES = {"TQ1_0": 54, "TQ2_0": 66}
SCALE_AT = {"TQ1_0": 52, "TQ2_0": 64}  # byte offset of the fp16 scale in a block


def random_blocks(rng, qtype, n_blocks):
    raw = rng.integers(0, 256, size=(n_blocks, BLOCK_BYTES[qtype]), dtype=np.uint8)
    d = (rng.standard_normal(n_blocks) * 0.5).astype(np.float16)
    raw[:, SCALE_AT[qtype]:SCALE_AT[qtype] + 2] = d.view(np.uint8).reshape(-1, 2)
    return raw


def test_fixture_files_are_intact():
    files = json.loads((DATA / "manifest.json").read_text())
    assert set(files) == {p.name for p in DATA.iterdir()} - {"manifest.json"}
    for name, info in files.items():
        data = (DATA / name).read_bytes()
        assert len(data) == info["bytes"] and hashlib.sha256(data).hexdigest() == info["sha256"], name


def test_type_info():
    for qtype in TYPES:
        info = _engine.type_info(qtype)
        assert (info["block_size"], info["type_size"]) == (256, BLOCK_BYTES[qtype])
        assert info["can_dequantize"] and info["can_quantize"] and info["has_matmul"]
        assert info["vec_dot_type"] == "Q8_K"


@pytest.mark.parametrize("qtype", TYPES)
def test_dequantize_random_blocks_bit_exact(qtype):
    raw = random_blocks(np.random.default_rng(1), qtype, 300)
    got = _engine.dequantize(raw, qtype, [300 * 256])
    want = gguf.quants.dequantize(raw.reshape(-1), gguf.GGMLQuantizationType[qtype]).reshape(-1)
    assert same_bits(got, want)


@pytest.mark.parametrize("qtype", TYPES)
def test_quantize_is_llama_cpps_reference(qtype):
    rec = np.load(DATA / "quantize_ref.npz")
    x = rec["x"]
    want = rec[qtype].reshape(x.shape[0], -1)
    for got in (_engine.quantize_ref(x, qtype), _engine.quantize(x, qtype)):
        got = np.asarray(got).reshape(x.shape[0], -1)
        bad = [i for i in range(x.shape[0]) if not np.array_equal(got[i], want[i])]
        assert not bad, f"{qtype}: blocks {bad} differ from llama.cpp's"


@pytest.mark.parametrize("qtype", TYPES)
def test_quantize_round_trip(qtype):
    """Each weight comes back as the nearest of -d, 0, d (d the block's largest magnitude,
    in fp16), and a dequantized block quantizes to its own bytes."""
    x = np.random.default_rng(5).standard_normal((4, 1024)).astype(np.float32)
    q = _engine.quantize(x, qtype)
    d = _engine.dequantize(q, qtype, list(x.shape)).reshape(-1, 256)
    xb = x.reshape(-1, 256)
    amax = np.abs(xb).max(axis=1, keepdims=True)
    want = np.round(xb / amax) * amax.astype(np.float16).astype(np.float32)
    assert np.array_equal(d, want)
    assert np.array_equal(np.asarray(_engine.quantize(d.reshape(x.shape), qtype)).reshape(-1), np.asarray(q).reshape(-1))


@pytest.mark.parametrize("qtype", TYPES)
def test_model_tensors_requantize_to_llama_cpps_bytes(qtype):
    """The model fixture's TQ tensors, dequantized and quantized again, are the bytes
    llama-quantize wrote (a ternary block is a fixed point of the quantizer)."""
    r = gguf.GGUFReader(DATA / f"llama-{qtype.lower()}.gguf")
    n = 0
    for t in r.tensors:
        if t.tensor_type.name != qtype:
            continue
        raw = np.asarray(t.data, np.uint8).reshape(-1)
        n_el = int(np.prod([int(v) for v in t.shape]))
        w = _engine.dequantize(raw, qtype, [n_el])
        assert np.array_equal(np.asarray(_engine.quantize(w.reshape(-1, 256), qtype)).reshape(-1), raw), t.name
        n += 1
    assert n == 14


def exact_dot(w_raw, qtype, n_rows, a):
    w64 = gguf.quants.dequantize(np.asarray(w_raw).reshape(n_rows, -1),
                                 gguf.GGMLQuantizationType[qtype]).astype(np.float64)
    a64 = activation_roundtrip(a[None], "Q8_K")[0].astype(np.float64)
    return w64 @ a64, np.abs(w64) @ np.abs(a64)


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("n_cols", [256, 512, 2304, 4096])
def test_vec_dot_levels(qtype, n_cols):
    rng = np.random.default_rng(n_cols)
    w = rng.standard_normal((9, n_cols)).astype(np.float32)
    a = rng.standard_normal(n_cols).astype(np.float32)
    w_raw = _engine.quantize(w, qtype)
    exact, scale = exact_dot(w_raw, qtype, 9, a)
    check_vec_dot(w_raw, qtype, n_cols, a, exact, scale)


@pytest.mark.parametrize("qtype", TYPES)
def test_vec_dot_random_blocks(qtype):
    """Every byte value (TQ1_0's bytes past 242 too) against activations with outliers."""
    rng = np.random.default_rng(9)
    n_cols = 2048
    w_raw = random_blocks(rng, qtype, 6 * n_cols // 256).reshape(6, -1)
    a = (rng.standard_normal(n_cols) * np.where(rng.random(n_cols) < 0.05, 100, 1)).astype(np.float32)
    exact, scale = exact_dot(w_raw.reshape(-1), qtype, 6, a)
    check_vec_dot(w_raw, qtype, n_cols, a, exact, scale)


@pytest.mark.parametrize("qtype", TYPES)
def test_vec_dot_levels_give_the_references_bits(qtype):
    """The integer block sums are exact at every level and the float step is the
    reference's, so the levels agree with it to the bit (up to FMA contraction, which
    moves one rounding: at most a few ulps of the row's magnitude)."""
    rng = np.random.default_rng(11)
    w_raw = random_blocks(rng, qtype, 8 * 4).reshape(8, -1)
    a = rng.standard_normal(1024).astype(np.float32)
    ref = _engine.vec_dot_rows(w_raw, qtype, 1024, a, "ref")
    for level in _engine.system_info()["cpu_isas"]:
        got = _engine.vec_dot_rows(w_raw, qtype, 1024, a, level)
        assert np.abs(got - ref).max() <= 4 * np.spacing(np.abs(ref).max()), level


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("n_rows,n_cols,n_tok", [(1, 256, 1), (3, 512, 3), (17, 256, 17), (33, 768, 67), (66, 512, 1),
                                                 (13, 2304, 5)])
def test_matmul_odd_shapes(qtype, n_rows, n_cols, n_tok):
    rng = np.random.default_rng(n_rows * 7919 + n_cols)
    w = rng.standard_normal((n_rows, n_cols)).astype(np.float32)
    x = rng.standard_normal((n_tok, n_cols)).astype(np.float32)
    w_raw = _engine.quantize(w, qtype)
    w64 = _engine.dequantize(w_raw, qtype, [n_rows, n_cols]).astype(np.float64)
    check_matmul(w_raw, qtype, n_rows, n_cols, x, w64, "Q8_K")


def record():
    return json.loads((DATA / "record.json").read_text())


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("ftype", TYPES)
def test_model_matches_llama_cpp(ftype, where):
    rec = record()
    fr = rec["files"][ftype]
    npz = np.load(DATA / "logits.npz")
    llm = Llama(model_path=str(DATA / fr["file"]), n_ctx=rec["n_ctx"], n_batch=rec["n_batch"], n_threads=2,
                logits_all=True, flash_attn=True, verbose=False, n_gpu_layers=-1 if where == "gpu" else 0)
    assert llm.n_vocab() == fr["n_vocab"]
    for pi, pr in enumerate(fr["prompts"]):
        check_recorded_prompt(llm, pr, npz[f"{ftype}.p{pi}.last_logits"], False, f"{ftype} prompt {pi}")
    llm.close()
