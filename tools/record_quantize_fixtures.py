"""Records llama.cpp's quantizer outputs for tests/test_quantize_llama_cpp.py.

Usage (from the repo root, in a Python with llama-cpp-python 0.3.36, gguf and numpy; none of
this is a llamapy dependency):

    python tools/record_quantize_fixtures.py --make-inputs   # the synthetic inputs (seeded)
    python tools/record_quantize_fixtures.py                 # tests/data/quantize/llama_cpp.json

Inputs: the tiny F16 fixtures of the dense, MoE, hybrid and Gemma 4 families (rows of 64 or
128 elements: they exercise the per-architecture rules and the fallbacks of the 256-element
types) and three synthetic files written here with seeded random weights whose rows are
multiples of 256, so that the K-quants, IQ4_XS, the grid i-quants, TQ1_0 and TQ2_0 themselves are
compared:
- ``synth_llama-f16.gguf``: llama, 8 blocks, GQA 4, tied embeddings, odd rows (96 and 48
  elements) in two blocks, and rows of zeros, constants, outliers and tiny values;
- ``synth_moe8-f32.gguf``: llama with 8 experts (Mixtral's rules), an output tensor, F32 input;
- ``synth_qwen2_80-f16.gguf``: qwen2 with 80 blocks (llama.cpp's "70B" rule, layer bumps);
- ``synth_falcon-f16.gguf`` and ``synth_phi3-f16.gguf``: fused attn_qkv, and Falcon's own rules.
Each (input, file type, options) case is quantized by ``llama_cpp.llama_model_quantize``
(1 thread); recorded: whether it succeeded, the SHA-256 of the whole output, of its header
(key/values and tensor table) and a 12-hex-digit SHA-256 prefix and the type of every tensor's
data, in file order. This script is a fixture generator, not part of llamapy.
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import pathlib
import sys
import tempfile

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
OUT_DIR = DATA / "quantize"

REAL_INPUTS = ["dense/olmo2/olmo2-f16.gguf", "moe/mixtral/mixtral-f16.gguf", "moe/deepseek2/deepseek2-f16.gguf",
               "moe/gptoss/gptoss-f16.gguf", "hybrid/qwen35/qwen35-f16.gguf", "hybrid/qwen35moe/qwen35moe-f16.gguf",
               "gemma4/e2b/gemma4_e2b-f16.gguf"]
SYNTH_INPUTS = ["quantize/synth_llama-f16.gguf", "quantize/synth_moe8-f32.gguf", "quantize/synth_qwen2_80-f16.gguf",
                "quantize/synth_falcon-f16.gguf", "quantize/synth_phi3-f16.gguf"]

# llama.h's llama_ftype ids of the file types llamapy writes, and the ones it refuses without an
# imatrix as llama.cpp does (Q2_K_S, IQ2_XXS, and IQ3_XXS / IQ3_XS where they hold IQ3_XXS tensors).
FTYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "Q8_0": 7, "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12,
          "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25,
          "IQ4_XS": 30, "F16": 1, "BF16": 32, "F32": 0, "MXFP4_MOE": 38, "Q2_K_S": 21, "IQ2_XXS": 19,
          "TQ1_0": 36, "TQ2_0": 37, "IQ3_XXS": 23, "IQ3_S": 26, "IQ3_M": 27, "IQ3_XS": 22}
# The file types llama.cpp refuses without an importance matrix wherever they hold a tensor of
# the 1- and 2-bit lattice types (written with one: IMATRIX_CASES). Without one they are recorded
# on the fixtures with 64-element rows, where every such tensor falls back to another type, which
# exercises their rules, and on synth_llama, where llamapy must refuse them as llama.cpp does.
FTYPES_IMATRIX_ONLY = {"IQ2_XS": 20, "IQ2_S": 28, "IQ2_M": 29, "IQ1_S": 24, "IQ1_M": 31}
# ggml type ids for the type options
GGML = {"Q4_0": 2, "Q8_0": 8, "Q5_K": 13, "Q6_K": 14, "F16": 1}

# (input, file type, options): options as quantize_model's keywords.
OPTION_CASES = [
    ("quantize/synth_llama-f16.gguf", "Q4_K_M", {"pure": True}),
    ("quantize/synth_moe8-f32.gguf", "Q4_K_M", {"leave_output_tensor": True}),
    ("quantize/synth_moe8-f32.gguf", "Q5_K_S", {"output_tensor_type": "Q8_0", "token_embedding_type": "Q4_0"}),
    ("quantize/synth_llama-f16.gguf", "Q3_K_M", {"token_embedding_type": "F16"}),
    ("quantize/synth_llama-f16.gguf", "Q4_K_M", {"tensor_types": [["attn_q", "Q5_K"], ["ffn_.*", "Q8_0"]]}),
    ("quantize/synth_llama-f16.gguf", "Q8_0", {"kv_overrides": [
        "general.name=str:renamed", "llama.context_length=int:-4096", "llama.rope.freq_base=float:500000.5",
        "general.custom_flag=bool:true"]}),
    ("gemma4/e2b/gemma4_e2b-f16.gguf", "Q4_K_M", {"token_embedding_type": "Q8_0",
                                                  "tensor_types": [["per_layer_token_embd", "Q6_K"]]}),
]
# Importance matrices (written by --make-inputs from seeded random activations): GGUF and legacy
# formats, dense and expert tensors, the 32-element types of the 64-element-row fixtures.
IMATRICES = {"quantize/synth_llama-f16.gguf": "synth_llama.imatrix.gguf",
             "quantize/synth_moe8-f32.gguf": "synth_moe8.imatrix.dat",
             "moe/mixtral/mixtral-f16.gguf": "mixtral.imatrix.gguf"}
IMATRIX_FTYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q2_K_S", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S",
                  "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4_MOE", "IQ2_XXS", "TQ1_0", "TQ2_0",
                  "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M"]
IMATRIX_CASES = [(inp, ft, {"imatrix": m}) for inp, m in IMATRICES.items() for ft in IMATRIX_FTYPES] + [
    ("quantize/synth_llama-f16.gguf", "Q4_K_M", {"imatrix": "synth_llama.imatrix.gguf",
                                                 "exclude_weights": ["ffn_down"]}),
    ("quantize/synth_llama-f16.gguf", "Q4_0", {"imatrix": "synth_llama.imatrix.gguf",
                                               "include_weights": ["attn_"]}),
]
# A model split in three parts (gguf-py's split writer): one output, or one per part (keep_split).
SPLIT_INPUT = "quantize/synth_split-00001-of-00003.gguf"
SPLIT_CASES = [(SPLIT_INPUT, "Q4_K_M", {}), (SPLIT_INPUT, "Q4_K_M", {"keep_split": True}),
               (SPLIT_INPUT, "Q8_0", {"keep_split": True}),
               ("quantize/synth_llama-f16.gguf", "Q4_K_M", {"keep_split": True})]
# Requantizing a quantized input: refused without allow_requantize, done with it.
REQUANT_CASES = [
    ("dense/olmo2/olmo2-q8_0.gguf", "Q4_0", {}),
    ("dense/olmo2/olmo2-q8_0.gguf", "Q4_0", {"allow_requantize": True}),
    ("dense/olmo2/olmo2-q8_0.gguf", "Q8_0", {}),
    # llama.cpp's IQ3_XXS file (rows of 256) to IQ3_S in every matrix: the model
    # tests/test_iq3_quantize.py loads and runs
    ("iq_lattice/llama_iq-iq3_xxs.gguf", "IQ3_S", {"allow_requantize": True, "pure": True}),
]


def all_cases():
    for inp in REAL_INPUTS + SYNTH_INPUTS:
        for ft in FTYPES:
            yield inp, ft, {}
    for inp in REAL_INPUTS + SYNTH_INPUTS[:1]:
        for ft in FTYPES_IMATRIX_ONLY:
            yield inp, ft, {}
    yield from OPTION_CASES
    yield from REQUANT_CASES
    yield from IMATRIX_CASES
    yield from SPLIT_CASES


def case_key(inp: str, ft: str, opts: dict) -> str:
    return f"{inp} {ft} {json.dumps(opts, sort_keys=True)}"


# -- synthetic inputs ---------------------------------------------------------

def _rows(rng: np.random.Generator, shape, special: bool = True) -> np.ndarray:
    """Gaussian weights with a few hard rows: zeros, a constant, an outlier, tiny values."""
    x = rng.standard_normal(shape).astype(np.float32) * 0.05
    if special:
        flat = x.reshape(-1, shape[-1])
        if flat.shape[0] >= 4:
            flat[0] = 0.0
            flat[1] = 0.25
            flat[2, 7] = 3.0
            flat[3] *= 1e-4
    return x


def _writer(path: pathlib.Path, arch: str, n_layer: int, n_head: int, n_head_kv: int, n_expert: int = 0):
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"synthetic {arch}")
    w.add_block_count(n_layer)
    w.add_context_length(256)
    w.add_embedding_length(256)
    w.add_feed_forward_length(512)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    if arch == "falcon":
        w.add_layer_norm_eps(1e-5)
    else:
        w.add_layer_norm_rms_eps(1e-5)
    if n_expert:
        w.add_expert_count(n_expert)
        w.add_expert_used_count(2)
    w.add_file_type(1)
    return w


def _imatrix_entries(path: pathlib.Path, rng: np.random.Generator) -> dict:
    """Random sums of squared activations and token counts for every 2-D/3-D weight of a model:
    name -> (sums (n_mat, ne0) float32, counts (n_mat,) int), one expert never routed to."""
    import gguf

    r = gguf.GGUFReader(str(path))
    out = {}
    for t in r.tensors:
        ne = [int(d) for d in t.shape]
        if len(ne) < 2 or not t.name.endswith(".weight") or "norm" in t.name:
            continue
        n_mat = ne[2] if len(ne) > 2 else 1
        counts = rng.integers(1, 200, n_mat)
        if n_mat > 1:
            counts[1] = 0
        sums = (rng.chisquare(2, (n_mat, ne[0])) * counts[:, None]).astype(np.float32)
        out[t.name] = (sums, counts)
    return out


def write_imatrices() -> None:
    import gguf

    rng = np.random.default_rng(38)
    for inp, name in IMATRICES.items():
        entries = _imatrix_entries(DATA / inp, rng)
        path = OUT_DIR / name
        if name.endswith(".gguf"):
            w = gguf.GGUFWriter(str(path), arch=None)
            w.add_type("imatrix")
            w.add_array("imatrix.datasets", ["random.txt"])
            w.add_uint32("imatrix.chunk_count", 10)
            w.add_uint32("imatrix.chunk_size", 512)
            for tname, (sums, counts) in entries.items():
                w.add_tensor(tname + ".in_sum2", sums)
                w.add_tensor(tname + ".counts", counts.astype(np.float32).reshape(-1, 1))
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
        else:  # legacy .dat: values are the averages times ncall (one ncall per entry)
            blob = [np.int32(len(entries)).tobytes()]
            for tname, (sums, counts) in entries.items():
                ncall = int(counts.max())
                avg = sums / np.maximum(counts, 1)[:, None].astype(np.float32)
                vals = (avg * np.float32(ncall)).astype(np.float32).reshape(-1)
                nb = tname.encode()
                blob += [np.int32(len(nb)).tobytes(), nb, np.int32(ncall).tobytes(), np.int32(vals.size).tobytes(),
                         vals.tobytes()]
            ds = b"random.txt"
            blob += [np.int32(10).tobytes(), np.int32(len(ds)).tobytes(), ds]
            path.write_bytes(b"".join(blob))


def imatrix_values(name: str) -> tuple:
    """What llama-quantize hands llama_model_quantize for a file written above: name ->
    float32 importances (GGUF: sums / count, 1 where the count is 0; legacy: values / ncall),
    and the file's dataset names and chunk count."""
    import gguf

    path = OUT_DIR / name
    if name.endswith(".gguf"):
        r = gguf.GGUFReader(str(path))
        sums = {t.name[:-8]: np.array(t.data, np.float32) for t in r.tensors if t.name.endswith(".in_sum2")}
        counts = {t.name[:-7]: np.array(t.data, np.float32).reshape(-1) for t in r.tensors
                  if t.name.endswith(".counts")}
        out = {}
        for k, s in sums.items():
            s = s.reshape(len(counts[k]), -1)
            v = np.ones_like(s)
            for j, c in enumerate(counts[k]):
                if round(float(c)) > 0:
                    v[j] = s[j] / np.float32(round(float(c)))
            out[k] = v.reshape(-1)
        datasets = list(r.fields["imatrix.datasets"].contents()) if "imatrix.datasets" in r.fields else ["random.txt"]
        chunks = int(r.fields["imatrix.chunk_count"].contents()) if "imatrix.chunk_count" in r.fields else 10
        return out, datasets, chunks
    data, pos, out = path.read_bytes(), 4, {}
    n = int(np.frombuffer(data[:4], np.int32)[0])
    for _ in range(n):
        ln = int(np.frombuffer(data[pos:pos + 4], np.int32)[0]); pos += 4
        key = data[pos:pos + ln].decode(); pos += ln
        ncall, nval = (int(v) for v in np.frombuffer(data[pos:pos + 8], np.int32)); pos += 8
        vals = np.frombuffer(data[pos:pos + 4 * nval], np.float32); pos += 4 * nval
        out[key] = vals / np.float32(ncall) if ncall > 0 else vals.copy()
    return out, ["random.txt"], 10


def make_inputs() -> None:
    import gguf

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(37)
    f16 = np.float16

    w = _writer(OUT_DIR / "synth_llama-f16.gguf", "llama", 8, 8, 2)
    w.add_tensor("token_embd.weight", _rows(rng, (32, 256)).astype(f16))
    w.add_tensor("output_norm.weight", np.ones(256, np.float32))
    for i in range(8):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(256, np.float32))
        w.add_tensor(p + "attn_q.weight", _rows(rng, (16, 48 if i == 6 else 256)).astype(f16))
        w.add_tensor(p + "attn_k.weight", _rows(rng, (8, 256)).astype(f16))
        w.add_tensor(p + "attn_v.weight", _rows(rng, (8, 256)).astype(f16))
        w.add_tensor(p + "attn_output.weight", _rows(rng, (16, 256)).astype(f16))
        w.add_tensor(p + "ffn_norm.weight", np.ones(256, np.float32))
        w.add_tensor(p + "ffn_gate.weight", _rows(rng, (16, 256)).astype(f16))
        w.add_tensor(p + "ffn_up.weight", _rows(rng, (16, 256)).astype(f16))
        w.add_tensor(p + "ffn_down.weight", _rows(rng, (16, 96 if i == 5 else 512)).astype(f16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    w = _writer(OUT_DIR / "synth_moe8-f32.gguf", "llama", 4, 4, 4, n_expert=8)
    w.add_tensor("token_embd.weight", _rows(rng, (16, 256)))
    w.add_tensor("output.weight", _rows(rng, (16, 256)))
    w.add_tensor("output_norm.weight", np.ones(256, np.float32))
    for i in range(4):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(256, np.float32))
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(p + t + ".weight", _rows(rng, (8, 256)))
        w.add_tensor(p + "ffn_norm.weight", np.ones(256, np.float32))
        w.add_tensor(p + "ffn_gate_inp.weight", _rows(rng, (8, 256)))
        for t in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
            w.add_tensor(p + t + ".weight", _rows(rng, (8, 4, 256)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    w = _writer(OUT_DIR / "synth_qwen2_80-f16.gguf", "qwen2", 80, 8, 1)
    w.add_tensor("token_embd.weight", _rows(rng, (4, 256)).astype(f16))
    w.add_tensor("output.weight", _rows(rng, (4, 256)).astype(f16))
    for i in range(80):
        p = f"blk.{i}."
        for t in ("attn_v", "attn_output", "ffn_down"):
            w.add_tensor(p + t + ".weight", _rows(rng, (2, 256), special=False).astype(f16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    for arch, n_layer in (("falcon", 16), ("phi3", 4)):
        w = _writer(OUT_DIR / f"synth_{arch}-f16.gguf", arch, n_layer, 8, 1)
        w.add_tensor("token_embd.weight", _rows(rng, (8, 256)).astype(f16))
        w.add_tensor("output.weight", _rows(rng, (8, 256)).astype(f16))
        for i in range(n_layer):
            p = f"blk.{i}."
            for t, cols in (("attn_qkv", 256), ("attn_output", 256), ("ffn_up", 256), ("ffn_down", 512)):
                w.add_tensor(p + t + ".weight", _rows(rng, (4, cols), special=i == 0).astype(f16))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    write_imatrices()

    # split: 4 blocks of a GQA-4 llama, 10 tensors a part, in an order unlike llama.cpp's
    w = gguf.GGUFWriter(str(OUT_DIR / "synth_split.gguf"), "llama", split_max_tensors=10)
    for key, add in (("block_count", w.add_block_count), ("context_length", w.add_context_length),
                     ("embedding_length", w.add_embedding_length), ("feed_forward_length", w.add_feed_forward_length)):
        add({"block_count": 4, "context_length": 256, "embedding_length": 256, "feed_forward_length": 512}[key])
    w.add_head_count(8)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tensor("token_embd.weight", _rows(rng, (8, 256)).astype(f16))
    for i in reversed(range(4)):
        p = f"blk.{i}."
        for t, cols in (("ffn_down", 512), ("attn_v", 256), ("attn_q", 256), ("ffn_up", 256), ("attn_k", 256)):
            w.add_tensor(p + t + ".weight", _rows(rng, (4, cols)).astype(f16))
    w.add_tensor("output.weight", _rows(rng, (8, 256)).astype(f16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    del gguf


# -- recording ----------------------------------------------------------------

QUANT_THREADS = [1]  # llama_model_quantize's nthread (--gemma --threads changes it)

def summarize(path: str) -> dict:
    import gguf

    r = gguf.GGUFReader(path)
    data = open(path, "rb").read()
    names, tensors = [], []
    for t in r.tensors:
        blob = data[t.data_offset:t.data_offset + t.n_bytes]
        names.append(t.name)
        tensors.append(f"{t.tensor_type.name}:{hashlib.sha256(blob).hexdigest()[:12]}")
    return {"file": hashlib.sha256(data).hexdigest(), "header": hashlib.sha256(data[:r.data_offset]).hexdigest(),
            "names": names, "tensors": tensors}


def quantize_with_llama_cpp(inp: str, out: str, ft: str, opts: dict) -> bool:
    import llama_cpp

    p = llama_cpp.llama_model_quantize_default_params()
    p.nthread = QUANT_THREADS[0]
    p.ftype = {**FTYPES, **FTYPES_IMATRIX_ONLY}[ft]
    p.pure = bool(opts.get("pure", False))
    p.quantize_output_tensor = not opts.get("leave_output_tensor", False)
    p.allow_requantize = bool(opts.get("allow_requantize", False))
    p.keep_split = bool(opts.get("keep_split", False))
    if "output_tensor_type" in opts:
        p.output_tensor_type = GGML[opts["output_tensor_type"]]
    if "token_embedding_type" in opts:
        p.token_embedding_type = GGML[opts["token_embedding_type"]]
    keep = []
    if "tensor_types" in opts:
        arr = (llama_cpp.llama_model_tensor_override * (len(opts["tensor_types"]) + 1))()
        for i, (pattern, t) in enumerate(opts["tensor_types"]):
            keep.append(pattern.encode())
            arr[i].pattern = keep[-1]
            arr[i].type = GGML[t]
        arr[len(opts["tensor_types"])].pattern = None
        p.tt_overrides = ctypes.cast(arr, type(p.tt_overrides))
        keep.append(arr)
    kv_overrides = list(opts.get("kv_overrides", []))
    if "imatrix" in opts:
        # as llama-quantize: --exclude-weights / --include-weights filter the entries, then the
        # matrix's provenance goes into the file through kv overrides
        values, datasets, chunks = imatrix_values(opts["imatrix"])
        for ex in opts.get("exclude_weights", []):
            values = {k: v for k, v in values.items() if ex not in k}
        if opts.get("include_weights"):
            values = {k: v for k, v in values.items() if any(s in k for s in opts["include_weights"])}
        arr = (llama_cpp.llama_model_imatrix_data * (len(values) + 1))()
        for i, (k, v) in enumerate(values.items()):
            keep.append(k.encode())
            keep.append(np.ascontiguousarray(v, np.float32))
            arr[i].name = keep[-2]
            arr[i].data = keep[-1].ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            arr[i].size = v.size
        arr[len(values)].name = None
        p.imatrix = ctypes.cast(arr, type(p.imatrix))
        keep.append(arr)
        kv_overrides += [f"quantize.imatrix.file=str:{opts['imatrix']}",
                         f"quantize.imatrix.dataset=str:{datasets[0]}",
                         f"quantize.imatrix.entries_count=int:{len(values)}",
                         f"quantize.imatrix.chunks_count=int:{chunks}"]
    if kv_overrides:
        arr = (llama_cpp.llama_model_kv_override * (len(kv_overrides) + 1))()
        for i, text in enumerate(kv_overrides):
            key, _, rest = text.partition("=")
            kind, _, value = rest.partition(":")
            arr[i].key = key.encode()
            if kind == "int":
                arr[i].tag, arr[i].value.val_i64 = llama_cpp.LLAMA_KV_OVERRIDE_TYPE_INT, int(value)
            elif kind == "float":
                arr[i].tag, arr[i].value.val_f64 = llama_cpp.LLAMA_KV_OVERRIDE_TYPE_FLOAT, float(value)
            elif kind == "bool":
                arr[i].tag, arr[i].value.val_bool = llama_cpp.LLAMA_KV_OVERRIDE_TYPE_BOOL, value == "true"
            else:
                arr[i].tag, arr[i].value.val_str = llama_cpp.LLAMA_KV_OVERRIDE_TYPE_STR, value.encode()
        arr[len(kv_overrides)].key = b""
        p.kv_overrides = ctypes.cast(arr, type(p.kv_overrides))
        keep.append(arr)
    return llama_cpp.llama_model_quantize(inp.encode(), out.encode(), ctypes.byref(p)) == 0


def record() -> None:
    import llama_cpp

    llama_cpp.llama_backend_init()
    cases = {}
    with tempfile.TemporaryDirectory() as tmp:
        for inp, ft, opts in all_cases():
            out = os.path.join(tmp, "out.gguf")
            # with keep_split the library takes the name without .gguf (llama-quantize strips it)
            ok = quantize_with_llama_cpp(str(DATA / inp), out[:-5] if opts.get("keep_split") else out, ft, opts)
            entry = {"input": inp, "ftype": ft, "options": opts, "ok": ok}
            if ok and opts.get("keep_split"):
                parts = sorted(f for f in os.listdir(tmp) if f.startswith("out-"))
                entry["parts"] = [dict(summarize(os.path.join(tmp, f)), name=f) for f in parts]
                for f in parts:
                    os.unlink(os.path.join(tmp, f))
            elif ok:
                entry.update(summarize(out))
                os.unlink(out)
            cases[case_key(inp, ft, opts)] = entry
            print(f"{'ok ' if ok else 'ERR'} {case_key(inp, ft, opts)}", file=sys.stderr)
    # the tensor names (in llama.cpp's output order) once per input
    inputs = {inp: {"sha256": hashlib.sha256((DATA / inp).read_bytes()).hexdigest()}
              for inp in sorted({c["input"] for c in cases.values()})}
    for name in IMATRICES.values():
        inputs["quantize/" + name] = {"sha256": hashlib.sha256((OUT_DIR / name).read_bytes()).hexdigest()}
    for k in (2, 3):
        part = SPLIT_INPUT.replace("00001-of", f"{k:05d}-of")
        inputs[part] = {"sha256": hashlib.sha256((DATA / part).read_bytes()).hexdigest()}
    for c in cases.values():
        if "names" in c:
            names = c.pop("names")
            assert inputs[c["input"]].setdefault("names", names) == names
    doc_cases = [c for c in cases.values()]
    doc = {"generator": "tools/record_quantize_fixtures.py", "llama_cpp_python": llama_cpp.__version__,
           "ftypes": {**FTYPES, **FTYPES_IMATRIX_ONLY}, "inputs": inputs, "cases": doc_cases}
    (OUT_DIR / "llama_cpp.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")


# -- Gemma 3 270M ---------------------------------------------------------------
# The test model's exact F16 copy (tests/float_model.py's write_float_copy of the Q4_K_M file
# that llamapy.default_model assembles), in every file type above; the importance matrix was
# computed on that copy by llama.cpp's own llama-imatrix:
#   llama-imatrix -m gemma-f16.gguf -f tests/data/perplexity/text.txt -c 128 -t 2 \
#       -o tests/data/quantize/gemma3_270m.imatrix.gguf
# Only hashes are committed (tests/data/quantize/gemma3_270m.json); the F16 copy is made again by
# the test. Rows of 640 elements: the 256-element types fall back on most matrices.
GEMMA_INPUT = "gemma-f16.gguf"  # a name, not a path: the copy lives in a temporary directory
GEMMA_IMATRIX = "gemma3_270m.imatrix.gguf"


def gemma_cases():
    for ft in FTYPES:
        yield ft, {}
    for ft in FTYPES_IMATRIX_ONLY:
        yield ft, {}
    for ft in IMATRIX_FTYPES:
        yield ft, {"imatrix": GEMMA_IMATRIX}


def record_gemma(n_threads: int, only: list) -> None:
    import llama_cpp

    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO))
    from float_model import write_float_copy
    from llamapy.default_model import default_model_path

    QUANT_THREADS[0] = n_threads
    llama_cpp.llama_backend_init()
    out_json = OUT_DIR / "gemma3_270m.json"
    prev = json.loads(out_json.read_text()) if only and out_json.exists() else None
    cases = {}
    if prev:
        cases = {case_key(GEMMA_INPUT, c["ftype"], c["options"]): c for c in prev["cases"]}
        for c in cases.values():
            if c.get("ok"):
                c["names"] = prev["inputs"][GEMMA_INPUT]["names"]
    with tempfile.TemporaryDirectory() as tmp:
        src = default_model_path()
        f16 = write_float_copy(src, os.path.join(tmp, GEMMA_INPUT), "F16")
        for ft, opts in gemma_cases():
            if only and ft not in only:
                continue
            out = os.path.join(tmp, "out.gguf")
            cwd = os.getcwd()
            os.chdir(OUT_DIR)  # the matrix's relative name goes into quantize.imatrix.file
            try:
                ok = quantize_with_llama_cpp(f16, out, ft, opts)
            finally:
                os.chdir(cwd)
            entry = {"input": GEMMA_INPUT, "ftype": ft, "options": opts, "ok": ok}
            if ok:
                entry.update(summarize(out))
                os.unlink(out)
            cases[case_key(GEMMA_INPUT, ft, opts)] = entry
            print(f"{'ok ' if ok else 'ERR'} {case_key(GEMMA_INPUT, ft, opts)}", file=sys.stderr, flush=True)
        inputs = {GEMMA_INPUT: {"sha256": hashlib.sha256(open(f16, "rb").read()).hexdigest(),
                                "source_sha256": hashlib.sha256(open(src, "rb").read()).hexdigest()},
                  "quantize/" + GEMMA_IMATRIX: {
                      "sha256": hashlib.sha256((OUT_DIR / GEMMA_IMATRIX).read_bytes()).hexdigest()}}
    for c in cases.values():
        if "names" in c:
            names = c.pop("names")
            assert inputs[GEMMA_INPUT].setdefault("names", names) == names
    order = {case_key(GEMMA_INPUT, ft, o): i for i, (ft, o) in enumerate(gemma_cases())}
    doc = {"generator": "tools/record_quantize_fixtures.py --gemma", "llama_cpp_python": llama_cpp.__version__,
           "threads": n_threads, "ftypes": {**FTYPES, **FTYPES_IMATRIX_ONLY}, "inputs": inputs,
           "cases": [cases[k] for k in sorted(cases, key=order.__getitem__)]}
    out_json.write_text(json.dumps(doc, separators=(",", ":")) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--make-inputs", action="store_true", help="write the synthetic inputs, then stop")
    ap.add_argument("--gemma", action="store_true",
                    help="record Gemma 3 270M's F16 copy instead: tests/data/quantize/gemma3_270m.json")
    ap.add_argument("--threads", type=int, default=1, help="quantizer threads for --gemma (the bytes do not "
                    "depend on them: rows are split between threads, each row quantized alone)")
    ap.add_argument("--only", nargs="*", default=[], help="--gemma: re-record these file types only")
    args = ap.parse_args()
    if args.gemma:
        record_gemma(args.threads, args.only)
    elif args.make_inputs:
        make_inputs()
    else:
        record()


if __name__ == "__main__":
    main()
