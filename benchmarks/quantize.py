"""Quantizer speed: llamapy's ``quantize_model`` against llama.cpp's ``llama_model_quantize``.

Writes a random F16 model with Llama-3.2-1B's shapes (hidden 2048, 16 layers, 32 heads, 8 KV
heads, FFN 8192, vocab 128256, tied embeddings; 2.5 GB) once, then quantizes it to Q4_K_M with
both, with the same thread count, and reports wall time per run (the file read from the page
cache, the output written to the same folder), alternating run after run, the CPU seconds of
each (the steadier number on a shared machine) and whether the two outputs are byte-identical.
llama.cpp runs in a subprocess of ``--llama-python`` (default: this interpreter), skipped when
that cannot import llama-cpp-python. Needs a quiet machine for numbers worth keeping.

    python benchmarks/quantize.py --threads 2 [--type Q4_K_M] [--runs 3] [--llama-python /venv/bin/python]
    python benchmarks/quantize.py --shape tiny     # a smoke run of the script itself
    python benchmarks/quantize.py --input ~/.cache/llamapy/gemma-3-270m-q4_k_m.gguf --allow-requantize \
        --type Q8_0 --llama-python /venv/bin/python   # a real model (requantized: no F16 Gemma here)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, REPO)

# name -> (hidden, layers, heads, kv heads, ffn, vocab)
SHAPES = {"1b": (2048, 16, 32, 8, 8192, 128256), "tiny": (256, 2, 4, 1, 512, 512)}

_LLAMA_CPP_RUN = r"""
import ctypes, json, sys, time
import llama_cpp
inp, out, ftype, threads, requant = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
llama_cpp.llama_backend_init()
p = llama_cpp.llama_model_quantize_default_params()
p.nthread, p.ftype, p.allow_requantize = threads, ftype, requant
t = time.perf_counter()
rc = llama_cpp.llama_model_quantize(inp.encode(), out.encode(), ctypes.byref(p))
print(json.dumps({"rc": rc, "seconds": time.perf_counter() - t, "version": llama_cpp.__version__}))
"""


def write_f16_model(path: str, shape: str) -> str:
    """A llama-architecture F16 model of random weights (written once; reused)."""
    from llamapy.gguf_header import align_up, header_bytes

    if os.path.exists(path):
        return path
    hidden, layers, heads, kv_heads, ffn, vocab = SHAPES[shape]
    kv = hidden // heads * kv_heads
    tensors = [("token_embd.weight", (vocab, hidden)), ("output_norm.weight", (hidden,))]
    for i in range(layers):
        p = f"blk.{i}."
        tensors += [(p + "attn_norm.weight", (hidden,)), (p + "attn_q.weight", (hidden, hidden)),
                    (p + "attn_k.weight", (kv, hidden)), (p + "attn_v.weight", (kv, hidden)),
                    (p + "attn_output.weight", (hidden, hidden)), (p + "ffn_norm.weight", (hidden,)),
                    (p + "ffn_gate.weight", (ffn, hidden)), (p + "ffn_up.weight", (ffn, hidden)),
                    (p + "ffn_down.weight", (hidden, ffn))]
    kvs = [("general.architecture", "string", "llama"), ("general.name", "string", f"random {shape} F16"),
           ("llama.block_count", "u32", layers), ("llama.context_length", "u32", 4096),
           ("llama.embedding_length", "u32", hidden), ("llama.feed_forward_length", "u32", ffn),
           ("llama.attention.head_count", "u32", heads), ("llama.attention.head_count_kv", "u32", kv_heads),
           ("llama.attention.layer_norm_rms_epsilon", "f32", 1e-5), ("llama.vocab_size", "u32", vocab),
           ("general.file_type", "u32", 1)]
    entries, offset = [], 0
    for name, shp in tensors:
        type_id, item = (0, 4) if len(shp) == 1 else (1, 2)
        entries.append((name, list(reversed(shp)), type_id, offset))
        offset += align_up(int(np.prod(shp)) * item, 32)
    rng = np.random.default_rng(0)
    block = (rng.standard_normal(1 << 20) * 0.02).astype(np.float16)  # tiled: generating 1.2 G values is slow
    with open(path + ".tmp", "wb") as f:
        f.write(header_bytes(kvs, entries, 32))
        for name, shp in tensors:
            n = int(np.prod(shp))
            data = np.ones(n, np.float32).tobytes() if len(shp) == 1 else np.resize(block, n).tobytes()
            f.write(data + b"\0" * (align_up(len(data), 32) - len(data)))
    os.replace(path + ".tmp", path)
    return path


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    ap.add_argument("--type", default="Q4_K_M")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "llamapy-quantize-bench"))
    ap.add_argument("--llama-python", default=sys.executable, help="interpreter with llama-cpp-python")
    ap.add_argument("--input", help="quantize this model instead of the random one")
    ap.add_argument("--allow-requantize", action="store_true", help="for a quantized --input")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()

    from llamapy.quant_mix import file_type
    from llamapy.quantize_gguf import quantize_model

    os.makedirs(args.work, exist_ok=True)
    if args.input:
        src, label = args.input, os.path.splitext(os.path.basename(args.input))[0]
    else:
        src = label = write_f16_model(os.path.join(args.work, f"{args.shape}-f16.gguf"), args.shape)
        label = args.shape
    ft = file_type(args.type)
    ours_out = os.path.join(args.work, f"{label}-{ft.name.lower()}.llamapy.gguf")
    theirs_out = os.path.join(args.work, f"{label}-{ft.name.lower()}.llama_cpp.gguf")
    results = {"input": label, "type": ft.name, "threads": args.threads, "input_bytes": os.path.getsize(src),
               "llamapy_s": [], "llama_cpp_s": []}
    # alternating, run after run (llamapy, then llama.cpp), so drift hits both alike
    for _ in range(args.runs):
        t, c = time.perf_counter(), time.process_time()
        quantize_model(src, ours_out, ft.name, n_threads=args.threads, allow_requantize=args.allow_requantize)
        results["llamapy_s"].append(round(time.perf_counter() - t, 3))
        results.setdefault("llamapy_cpu_s", []).append(round(time.process_time() - c, 3))
        if results.get("llama_cpp", "").startswith("not run"):
            continue
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([args.llama_python, "-c", _LLAMA_CPP_RUN, src, theirs_out, str(ft.ftype),
                               str(args.threads), "1" if args.allow_requantize else "0"],
                              capture_output=True, text=True)
        c2 = resource.getrusage(resource.RUSAGE_CHILDREN)
        # its whole process (interpreter start and import included: ~0.1-0.3 s)
        results.setdefault("llama_cpp_cpu_s", []).append(
            round(c2.ru_utime + c2.ru_stime - c.ru_utime - c.ru_stime, 3))
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            results["llama_cpp"] = f"not run: {args.llama_python} could not run llama-cpp-python's quantizer"
            continue
        rec = json.loads(lines[-1])
        if rec["rc"] != 0:
            raise SystemExit(f"llama_model_quantize failed: {proc.stderr[-2000:]}")
        results["llama_cpp"] = rec["version"]
        results["llama_cpp_s"].append(round(rec["seconds"], 3))
    if results["llama_cpp_s"]:
        results["identical"] = sha256(ours_out) == sha256(theirs_out)
        results["speedup"] = round(min(results["llama_cpp_s"]) / min(results["llamapy_s"]), 3)
    print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
