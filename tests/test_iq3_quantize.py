"""Quantization to IQ3_XXS and IQ3_S (vendor/engine/quants/iq_lattice_write_iq3.cpp).

- Row level: the bytes llama.cpp's quantizer wrote for seeded rows (normal, heavy-tailed,
  zeros, constants, tiny, large, zero and one-hot sub-blocks, sign patterns; several blocks
  per row), with and without importance weights: tests/data/iq_lattice/
  iq3_quantize_llama_cpp.json, recorded by tools/record_iq3_quantize_fixtures.py through
  ggml_quantize_chunk. Every entry point must give them: the engine's reference and table
  quantizer, the weighted one, and ``llamapy.quantize``.
- Inputs llama.cpp aborts on (NaN, ±inf, huge magnitudes) give valid blocks here, and do not
  disturb the other super-blocks of their row.
- Round trip: dequantize(quantize(x)) stays close to x, importance weights lower the
  weighted error, and the written blocks multiply as their dequantized values do.
Whole files (llama-quantize's IQ3_XXS / IQ3_XS / IQ3_S / IQ3_M mixes, with and without an
importance matrix): tests/test_quantize_llama_cpp.py.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import llamapy
from llamapy import _engine
from quant_checks import assert_recorded_bytes, load_tool

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURE = json.loads((ROOT / "tests" / "data" / "iq_lattice" / "iq3_quantize_llama_cpp.json").read_text())
TYPES = ["IQ3_XXS", "IQ3_S"]
BLOCK_BYTES = {"IQ3_XXS": 98, "IQ3_S": 110}
REC = load_tool("record_iq3_quantize_fixtures")
INPUTS = REC.inputs()
sha = REC.sha  # the digest the recorder took of its inputs and weights
CASES = FIXTURE["cases"]


@pytest.mark.parametrize("case", CASES, ids=[f"{c['input']}-{c['type']}-{'w' if c['weighted'] else 'x2'}"
                                             for c in CASES])
def test_rows_are_llama_cpps(case):
    x = INPUTS[case["input"]]
    assert sha(x) == case["x_sha256"], "the seeded input differs from the recorded one (numpy's generator?)"
    qtype = case["type"]
    if case["weighted"]:
        qw = REC.importance(case["input"], x.shape[1])
        assert sha(qw) == case["weights_sha256"]
        outs = {"quantize_weighted": _engine.quantize_weighted(x, qtype, qw),
                "llamapy.quantize": llamapy.quantize(x, qtype, imatrix=qw)}
    else:
        outs = {"quantize_ref": _engine.quantize_ref(x, qtype), "quantize": _engine.quantize(x, qtype),
                "llamapy.quantize": llamapy.quantize(x, qtype)}
    for how, got in outs.items():
        got = np.ascontiguousarray(got).reshape(-1)
        assert got.size == x.size // 256 * BLOCK_BYTES[qtype]
        assert_recorded_bytes(got, case["out_sha256"], case.get("out_hex"), BLOCK_BYTES[qtype], f"{how} {qtype}")


@pytest.mark.parametrize("qtype", TYPES)
def test_type_info_says_written(qtype):
    info = _engine.type_info(qtype)
    assert info["can_quantize"] and info["can_quantize_weighted"] and info["can_dequantize"]


def test_fixture_covers_both_types_with_and_without_weights():
    kinds = {(c["type"], c["weighted"]) for c in CASES}
    assert kinds == {(t, w) for t in TYPES for w in (False, True)}
    assert {c["input"] for c in CASES} == set(INPUTS)


@pytest.mark.parametrize("qtype", TYPES)
def test_bad_values_give_valid_blocks(qtype):
    """NaN, ±inf and magnitudes whose squared errors overflow (llama.cpp aborts on them):
    blocks of the right size, and the row's other super-blocks as if alone."""
    rng = np.random.default_rng(11)
    clean = rng.standard_normal(256).astype(np.float32)
    ones = np.ones(512, np.float32)
    quantizers = {"x2": lambda r: _engine.quantize(r, qtype),
                  "weighted": lambda r: _engine.quantize_weighted(r, qtype, ones[:r.shape[1]])}
    for how, quantize in quantizers.items():
        want = quantize(clean[None]).reshape(-1)
        for bad in (np.nan, np.inf, -np.inf, 1e20, -3e38):
            for where in (0, 37, 255):
                block = rng.standard_normal(256).astype(np.float32)
                block[where] = bad
                q = quantize(np.concatenate([block, clean])[None]).reshape(-1)
                assert q.size == 2 * BLOCK_BYTES[qtype]
                assert np.array_equal(q[BLOCK_BYTES[qtype]:], want), (how, bad, where)
                _engine.dequantize(q, qtype, [512])  # decodes (any value) without error


@pytest.mark.parametrize("qtype", TYPES)
def test_weights_must_match_the_row(qtype):
    x = np.zeros((2, 256), np.float32)
    with pytest.raises(ValueError, match="one value per column"):
        llamapy.quantize(x, qtype, imatrix=np.ones(255, np.float32))
    with pytest.raises(ValueError, match="multiple of"):
        llamapy.quantize(np.zeros((2, 200), np.float32), qtype)


# Relative RMS error of dequantize(quantize(x)) on these Gaussian rows, measured 2026-12-07 (the
# bytes are llama.cpp's, so the errors are too): IQ3_XXS 0.213, IQ3_S 0.166 (Q2_K 0.297, Q3_K
# 0.150, IQ4_XS 0.076). Without an importance matrix the x² weights favour the large values,
# which costs RMS error. Bounds leave a small margin.
RMS_BOUND = {"IQ3_XXS": 0.23, "IQ3_S": 0.18}


@pytest.mark.parametrize("qtype", TYPES)
def test_round_trip_error(qtype):
    x = np.random.default_rng(21).standard_normal((64, 1024)).astype(np.float32)
    y = llamapy.dequantize(llamapy.quantize(x, qtype), qtype, x.shape)
    rel = np.sqrt(np.mean((y - x) ** 2) / np.mean(x ** 2))
    assert rel < RMS_BOUND[qtype]
    # signs survive wherever a weight is not tiny
    big = np.abs(x) > 0.5
    assert np.mean(np.sign(y[big]) == np.sign(x[big])) > 0.99


@pytest.mark.parametrize("qtype", TYPES)
def test_importance_lowers_the_weighted_error(qtype):
    rng = np.random.default_rng(22)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    qw = (rng.chisquare(1, 512) + 0.01).astype(np.float32)

    def weighted_err(q):
        y = llamapy.dequantize(q, qtype, x.shape)
        return float(np.sum(qw * (y - x) ** 2))

    assert weighted_err(llamapy.quantize(x, qtype, imatrix=qw)) < 0.9 * weighted_err(llamapy.quantize(x, qtype))


@pytest.mark.parametrize("qtype", TYPES)
def test_written_blocks_multiply_like_their_values(qtype):
    rng = np.random.default_rng(23)
    x = rng.standard_normal((16, 512)).astype(np.float32)
    q = llamapy.quantize(x, qtype)
    w = llamapy.dequantize(q, qtype, x.shape).astype(np.float64)
    a = rng.standard_normal((3, 512)).astype(np.float32)
    got = _engine.matmul(q, qtype, 16, 512, a, n_threads=1)
    want = a.astype(np.float64) @ w.T
    assert np.allclose(got, want, rtol=0, atol=0.02 * np.abs(want).max())


def test_written_model_loads_and_runs(tmp_path):
    """llama.cpp's IQ3_XXS fixture model requantized to IQ3_S in every matrix (the bytes are
    llama.cpp's: tests/test_quantize_llama_cpp.py's requantize case) loads, runs, and stays
    near its source. This random 2-layer model is very sensitive to weight noise: llama.cpp's
    own IQ3_XXS and IQ3_S files of one F16 model give logits correlated by 0.46, the source
    requantized to Q4_K_M by 0.95, to IQ3_S by 0.67 (measured 2026-12-07): a broken writer (wrong
    grid points, signs or scales) falls to about 0."""
    from llamapy import Llama, quantize_model

    src = ROOT / "tests" / "data" / "iq_lattice" / "llama_iq-iq3_xxs.gguf"
    out = tmp_path / "iq3_s.gguf"
    res = quantize_model(src, out, "IQ3_S", pure=True, allow_requantize=True, n_threads=2)
    assert {t for n, t in res.types.items() if not n.endswith("norm.weight")} == {"IQ3_S"}
    prompt = [17, 101, 250, 237, 277, 162, 22, 99, 268, 34, 176, 267]

    def logits(path):
        with Llama(model_path=str(path), n_ctx=64, n_batch=64, n_threads=2, logits_all=True, verbose=False) as llm:
            llm.eval(prompt)
            scores = np.array(llm.scores[:len(prompt)])
            tokens = [t for _, t in zip(range(8), llm.generate(prompt, temp=0.0))]
        return scores, tokens

    theirs, _ = logits(src)
    ours, tokens = logits(out)
    assert np.isfinite(ours).all()
    assert len(tokens) == 8 and all(0 <= t < ours.shape[1] for t in tokens)
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] > 0.5
