"""Records llama.cpp's IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M quantizer output for
tests/test_iq_lattice_write.py: tests/data/iq_lattice/write_llama_cpp.json.

Usage (from the repo root, in a Python with llama-cpp-python 0.3.36 and numpy; not a llamapy
dependency):

    /tmp/moeenv/bin/python tools/record_iq_lattice_write_fixtures.py

The inputs come from ``cases()`` below (seeded numpy draws; the test regenerates them with the
same code and checks their SHA-256 first): per case a float32 matrix (rows, n) and one
importance value per column, or none. Each is quantized by ``ggml_quantize_chunk`` of
llama-cpp-python's libggml-base (through tools/ggml_quantize_chunk.py) and the SHA-256 of the
output recorded, with the bytes themselves for the single-block cases. Cases without an
importance matrix are recorded only for IQ2_S and IQ1_M (the others abort without). A fixture
generator, not part of llamapy.
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "iq_lattice" / "write_llama_cpp.json"
QK_K = 256
# ggml type ids and block bytes
TYPES = {"IQ2_XXS": (16, 66), "IQ2_XS": (17, 74), "IQ2_S": (22, 82), "IQ1_S": (19, 50), "IQ1_M": (29, 56)}
NEEDS_IMATRIX = ("IQ2_XXS", "IQ2_XS", "IQ1_S")


def cases() -> dict:
    """name -> (x (rows, n) float32, importance (n,) float32 or None). Shared with the test."""
    rng = np.random.default_rng(2037)

    def imp(n: int) -> np.ndarray:
        return (rng.chisquare(2, n) + 1e-3).astype(np.float32)

    def f32(a) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.float32)

    out = {}
    out["normal"] = (f32(rng.standard_normal((6, 512)) * 0.05), imp(512))
    out["heavy_tailed"] = (f32(rng.standard_t(2, (6, 256)) * 0.02), imp(256))
    out["cauchy_outliers"] = (f32(rng.standard_cauchy((3, 256))), imp(256))
    out["zeros"] = (np.zeros((1, 256), np.float32), imp(256))
    out["constant_pos"] = (np.full((1, 256), 0.25, np.float32), imp(256))
    out["constant_neg"] = (np.full((1, 256), -0.75, np.float32), imp(256))
    out["few_levels"] = (f32(np.round(rng.standard_normal((4, 256)) * 2) / 4), imp(256))  # many ties
    out["tiny_1e-6"] = (f32(rng.standard_normal((2, 256)) * 1e-6), imp(256))
    out["tiny_1e-9"] = (f32(rng.standard_normal((2, 256)) * 1e-9), imp(256))
    out["tiny_1e-20"] = (f32(rng.standard_normal((1, 256)) * 1e-20), imp(256))
    out["large_4e4"] = (f32(rng.standard_normal((2, 256)) * 4e4), imp(256))
    out["one_spike"] = (f32(np.where(np.arange(256) == 137, 2.5, 0.0)[None, :]), imp(256))
    sparse = rng.standard_normal((4, 256)) * (rng.random((4, 256)) < 0.1)
    out["sparse"] = (f32(sparse), imp(256))
    # rows of several super-blocks, each block at its own magnitude
    multi = rng.standard_normal((3, 2048)) * np.repeat(rng.uniform(1e-3, 10, (3, 8)), 256, axis=1)
    out["multi_block"] = (f32(multi), imp(2048))
    w0 = imp(256)
    w0[rng.random(256) < 0.3] = 0  # columns never used: importance 0
    out["zero_importance"] = (f32(rng.standard_normal((4, 256)) * 0.1), w0)
    out["uniform_importance"] = (f32(rng.standard_normal((4, 256))), np.ones(256, np.float32))
    wide = imp(256) * np.float32(1e4)
    wide[:16] *= np.float32(1e-8)
    out["wide_importance"] = (f32(rng.standard_normal((4, 256))), wide)
    out["unweighted_normal"] = (f32(rng.standard_normal((6, 512)) * 0.05), None)
    out["unweighted_heavy"] = (f32(rng.standard_t(2, (4, 256)) * 0.02), None)
    out["unweighted_constant"] = (np.full((1, 256), 0.25, np.float32), None)
    return out


def input_digest(x: np.ndarray, w) -> str:
    h = hashlib.sha256(x.tobytes())
    if w is not None:
        h.update(w.tobytes())
    return h.hexdigest()


def main() -> None:
    import llama_cpp

    # here, not at the top: the test imports this file (for cases()) without tools/ on its path
    from ggml_quantize_chunk import quantize_rows

    doc = {"generator": "tools/record_iq_lattice_write_fixtures.py", "llama_cpp_python": llama_cpp.__version__,
           "inputs": {}, "outputs": {}}
    for name, (x, w) in cases().items():
        doc["inputs"][name] = input_digest(x, w)
        for tname, (tid, bsize) in TYPES.items():
            if w is None and tname in NEEDS_IMATRIX:
                continue
            out = quantize_rows(tid, x, w)
            # the test sizes its outputs by TYPES: it must agree with ggml's block size
            assert len(out) == x.size // QK_K * bsize, (name, tname, len(out))
            rec = {"sha256": hashlib.sha256(out).hexdigest()}
            if x.size == QK_K:
                rec["hex"] = out.hex()
            doc["outputs"][f"{tname} {name}"] = rec
            print(f"{tname:8s} {name}", file=sys.stderr)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
