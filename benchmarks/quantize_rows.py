"""Row quantizer speed: llamapy's importance-weighted quantizers against llama.cpp's
``ggml_quantize_chunk``, one thread each, in CPU seconds (time.process_time: the steady number
on a shared machine).

A seeded Gaussian (rows, cols) float32 matrix (default 256 × 4096) with chi-square importances
is quantized to each type ``--runs`` times by both, alternating; reported per type: the first
call (it includes building the type's grid tables where it has them: ggml_quantize_init for
llama.cpp) and the best of the later calls, and whether the bytes are identical. llama.cpp runs
in a subprocess of ``--llama-python`` (a Python with llama-cpp-python; skipped when that cannot
import it).

    python benchmarks/quantize_rows.py --llama-python /tmp/moeenv/bin/python \
        [--types IQ2_XXS,IQ2_XS,IQ2_S,IQ1_S,IQ1_M] [--rows 256 --cols 4096] [--runs 3]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, REPO)

_LLAMA_CPP_RUN = r"""
import ctypes, hashlib, json, pathlib, sys, time
import numpy as np
import llama_cpp
x = np.load(sys.argv[1]); w = np.load(sys.argv[2]); tid, bsize, runs = (int(v) for v in sys.argv[3:6])
lib = ctypes.CDLL(str(pathlib.Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
lib.ggml_quantize_chunk.restype = ctypes.c_size_t
lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                    ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
lib.ggml_quantize_init.argtypes = [ctypes.c_int]
dst = np.zeros(x.shape[0] * x.shape[1] // 256 * bsize, np.uint8)
times = []
for r in range(runs):
    t = time.process_time()
    if r == 0:
        lib.ggml_quantize_init(tid)
    lib.ggml_quantize_chunk(tid, x.ctypes.data, dst.ctypes.data, 0, x.shape[0], x.shape[1], w.ctypes.data)
    times.append(time.process_time() - t)
print(json.dumps({"times": times, "sha": hashlib.sha256(dst.tobytes()).hexdigest()}))
"""

# ggml type ids (ggml.h) of the 256-element types this compares
GGML_IDS = {"Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "IQ2_XXS": 16, "IQ2_XS": 17,
            "IQ3_XXS": 18, "IQ1_S": 19, "IQ3_S": 21, "IQ2_S": 22, "IQ4_XS": 23, "IQ1_M": 29}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--types", default="IQ2_XXS,IQ2_XS,IQ2_S,IQ1_S,IQ1_M")
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--llama-python", default=sys.executable)
    args = ap.parse_args()

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from llamapy import _engine

    rng = np.random.default_rng(1)
    x = rng.standard_normal((args.rows, args.cols)).astype(np.float32)
    w = (rng.chisquare(2, args.cols) + 0.01).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        xp, wp = os.path.join(tmp, "x.npy"), os.path.join(tmp, "w.npy")
        np.save(xp, x)
        np.save(wp, w)
        print(f"{args.rows} x {args.cols}, CPU seconds, 1 thread: first call / best of the others")
        for t in args.types.split(","):
            ours = []
            for r in range(args.runs):
                t0 = time.process_time()
                q = _engine.quantize_weighted(x, t, w)
                ours.append(time.process_time() - t0)
            sha = hashlib.sha256(q.tobytes()).hexdigest()
            info = _engine.type_info(t)
            res = subprocess.run([args.llama_python, "-c", _LLAMA_CPP_RUN, xp, wp, str(GGML_IDS[t]),
                                  str(info["type_size"]), str(args.runs)], capture_output=True, text=True)
            theirs = json.loads(res.stdout) if res.returncode == 0 else None
            line = f"{t:8s} llamapy {ours[0]:.3f} / {min(ours[1:] or ours):.3f}"
            if theirs:
                tt = theirs["times"]
                line += (f"   llama.cpp {tt[0]:.3f} / {min(tt[1:] or tt):.3f}"
                         f"   ratio {min(tt[1:] or tt) / min(ours[1:] or ours):.2f}x"
                         f"   {'identical' if theirs['sha'] == sha else 'DIFFERENT'}")
            else:
                line += "   llama.cpp: not run (" + (res.stderr.strip().splitlines() or ["?"])[-1] + ")"
            print(line, flush=True)


if __name__ == "__main__":
    main()
