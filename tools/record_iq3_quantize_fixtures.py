"""Records llama.cpp's IQ3_XXS and IQ3_S quantizers on seeded rows for
tests/test_iq3_quantize.py: tests/data/iq_lattice/iq3_quantize_llama_cpp.json.

Usage (from the repo root, in a Python with llama-cpp-python 0.3.36 and numpy; not a llamapy
dependency):

    /tmp/moeenv/bin/python tools/record_iq3_quantize_fixtures.py

Each case is a matrix of rows (``inputs()``, seeded; the test draws the same ones and checks
their SHA-256 first), quantized by ``ggml_quantize_chunk`` in llama-cpp-python's libggml-base
(through tools/ggml_quantize_chunk.py), once without importance weights (llama.cpp then weighs
each element by x²) and once with seeded positive weights per column (an imatrix row; some
cases with zeros among them). Recorded: the SHA-256 of the input rows, of the weights and of the
output blocks, and the output's bytes in hex where they are small. Not recorded: inputs
llama.cpp aborts on (NaN, ±inf, magnitudes whose squared errors overflow); the test checks
that llamapy survives those. A fixture generator, not part of llamapy.
"""
from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "iq_lattice" / "iq3_quantize_llama_cpp.json"
GGML_TYPE = {"IQ3_XXS": 18, "IQ3_S": 21}
HEX_MAX = 512  # outputs up to this many bytes are stored whole


def _sub_blocks(rng: np.random.Generator, n_rows: int, n: int) -> np.ndarray:
    """Sub-blocks (32 weights) of widely different magnitudes, some all zero, some one-hot."""
    x = rng.standard_normal((n_rows, n // 32, 32)).astype(np.float32)
    x *= (10.0 ** rng.uniform(-6, 2, (n_rows, n // 32, 1))).astype(np.float32)
    x[:, ::5] = 0.0
    one_hot = np.zeros(32, np.float32)
    one_hot[13] = -0.75
    x[:, 3::7] = one_hot
    return x.reshape(n_rows, n)


def inputs() -> dict:
    """name -> float32 rows (n_rows, n), n a multiple of 256. Deterministic."""
    rng = np.random.default_rng(3303)
    x = {}
    x["normal"] = rng.standard_normal((8, 512)).astype(np.float32)
    x["normal_small"] = (rng.standard_normal((2, 256)) * 0.02).astype(np.float32)
    x["heavy_tailed"] = rng.standard_t(2, (8, 256)).astype(np.float32)
    x["cauchy"] = rng.standard_cauchy((4, 256)).astype(np.float32)
    x["zeros"] = np.zeros((2, 256), np.float32)
    x["constants"] = np.stack([np.full(256, 0.25), np.full(256, -1.5), np.full(256, 3e-5)]).astype(np.float32)
    x["tiny"] = np.concatenate([rng.standard_normal((2, 256)) * 1e-6, rng.standard_normal((2, 256)) * 1e-9,
                                rng.standard_normal((1, 256)) * 1e-20]).astype(np.float32)
    x["large"] = (rng.standard_normal((2, 256)) * 1e6).astype(np.float32)
    x["sub_blocks"] = _sub_blocks(rng, 6, 768)
    # the first or last sub-block all zeros (IQ3_S then writes the others one place earlier)
    zs = rng.standard_normal((4, 256)).astype(np.float32)
    zs[0, :32] = 0.0
    zs[1, 224:] = 0.0
    zs[2, 32:96] = 0.0
    zs[3, ::2] = 0.0
    x["zero_sub_blocks"] = zs
    # odd numbers of negatives per 8 (IQ3_XXS's parity fix) and ties in magnitude
    x["signs"] = np.where(rng.random((4, 256)) < 0.5, -1.0, 1.0).astype(np.float32) * \
        rng.integers(1, 4, (4, 256)).astype(np.float32)
    x["positive"] = np.abs(rng.standard_normal((2, 256))).astype(np.float32)
    x["one_outlier"] = (rng.standard_normal((2, 256)) * 0.01).astype(np.float32)
    x["one_outlier"][:, 100] = 25.0
    x["wide"] = rng.standard_normal((2, 4096)).astype(np.float32)
    return x


def importance(name: str, n: int) -> np.ndarray:
    """Seeded positive per-column weights for case `name` (zeros in a few columns of some)."""
    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")
    rng = np.random.default_rng(seed)
    w = rng.chisquare(2, n).astype(np.float32) + np.float32(1e-3)
    if name in ("normal", "sub_blocks", "signs"):
        w[::11] = 0.0
    return w


def sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def main() -> None:
    import llama_cpp

    # here, not at the top: the test imports this file (for inputs()) without tools/ on its path
    from ggml_quantize_chunk import quantize_rows

    cases = []
    for name, x in inputs().items():
        for qtype, t in GGML_TYPE.items():
            for weighted in (False, True):
                qw = importance(name, x.shape[1]) if weighted else None
                out = quantize_rows(t, x, qw)
                case = {"input": name, "type": qtype, "weighted": weighted, "x_sha256": sha(x),
                        "out_sha256": hashlib.sha256(out).hexdigest()}
                if qw is not None:
                    case["weights_sha256"] = sha(qw)
                if len(out) <= HEX_MAX:
                    case["out_hex"] = out.hex()
                cases.append(case)
    doc = {"generator": "tools/record_iq3_quantize_fixtures.py", "llama_cpp_python": llama_cpp.__version__,
           "cases": cases}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(cases)} cases -> {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
