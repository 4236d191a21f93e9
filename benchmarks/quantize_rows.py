"""Row quantizer speed: the engine's reference quantizers against llama.cpp's
(``ggml_quantize_chunk`` in llama-cpp-python's libggml-base, through ctypes), in CPU seconds of
one thread (``time.process_time``: the machine is shared, so wall time would measure the
neighbours), on one seeded Gaussian matrix, without and with importance weights.

    python benchmarks/quantize_rows.py --types IQ3_XXS,IQ3_S [--rows 256 --cols 4096] [--runs 5] \
        [--llama-python /tmp/moeenv/bin/python]

llama.cpp runs in a subprocess of ``--llama-python`` (default: this interpreter; skipped when it
cannot import llama-cpp-python). Each side quantizes the matrix ``--runs`` times after one
untimed run (tables built, pages touched); the best run is reported, and whether the two
outputs are byte-identical.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, REPO)

_LLAMA_CPP_RUN = r"""
import ctypes, hashlib, json, pathlib, sys, time
import numpy as np
import llama_cpp
x = np.load(sys.argv[1])
w = np.load(sys.argv[2])
ggml_type, row_bytes, runs = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
g = ctypes.CDLL(str(pathlib.Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
g.ggml_quantize_init.argtypes = [ctypes.c_int]
g.ggml_quantize_chunk.restype = ctypes.c_size_t
g.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                  ctypes.c_int64, ctypes.c_void_p]
g.ggml_quantize_init(ggml_type)
out = {}
for name, qw in (("plain", None), ("weighted", w)):
    dst = np.zeros(x.shape[0] * row_bytes, np.uint8)
    best = None
    for r in range(runs + 1):
        t = time.process_time()
        g.ggml_quantize_chunk(ggml_type, x.ctypes.data, dst.ctypes.data, 0, x.shape[0], x.shape[1],
                              None if qw is None else qw.ctypes.data)
        dt = time.process_time() - t
        if r:
            best = dt if best is None else min(best, dt)
    out[name] = {"seconds": best, "sha256": hashlib.sha256(dst.tobytes()).hexdigest()}
out["version"] = llama_cpp.__version__
print(json.dumps(out))
"""


def best_of(fn, runs: int):
    fn()
    times = []
    for _ in range(runs):
        t = time.process_time()
        q = fn()
        times.append(time.process_time() - t)
    return min(times), hashlib.sha256(np.ascontiguousarray(q).tobytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--types", default="IQ3_XXS,IQ3_S")
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--llama-python", default=sys.executable)
    args = ap.parse_args()

    from llamapy import _engine
    import tempfile

    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.rows, args.cols)).astype(np.float32)
    w = (rng.chisquare(2, args.cols) + 1e-3).astype(np.float32)
    print(f"{args.rows} x {args.cols} Gaussian, CPU seconds of one thread, best of {args.runs}")
    print(f"{'type':8} {'weights':9} {'llamapy':>9} {'llama.cpp':>10} {'ratio':>6}  same bytes")
    with tempfile.TemporaryDirectory() as tmp:
        xp, wp = os.path.join(tmp, "x.npy"), os.path.join(tmp, "w.npy")
        np.save(xp, x)
        np.save(wp, w)
        for t in args.types.split(","):
            info = _engine.type_info(t)
            ours = {"plain": best_of(lambda: _engine.quantize_ref(x, t), args.runs),
                    "weighted": best_of(lambda: _engine.quantize_weighted(x, t, w), args.runs)}
            row_bytes = _engine.row_size(t, args.cols)
            proc = subprocess.run([args.llama_python, "-c", _LLAMA_CPP_RUN, xp, wp, str(info["id"]), str(row_bytes),
                                   str(args.runs)], capture_output=True, text=True)
            theirs = json.loads(proc.stdout) if proc.returncode == 0 else None
            if theirs is None:
                print(f"llama.cpp run failed: {proc.stderr.strip()[-300:]}", file=sys.stderr)
            for kind in ("plain", "weighted"):
                s, h = ours[kind]
                if theirs:
                    ts, th = theirs[kind]["seconds"], theirs[kind]["sha256"]
                    print(f"{t:8} {kind:9} {s:9.3f} {ts:10.3f} {ts / s:5.2f}x  {'yes' if h == th else 'NO'}")
                else:
                    print(f"{t:8} {kind:9} {s:9.3f} {'-':>10}")


if __name__ == "__main__":
    main()
