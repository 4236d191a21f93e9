"""Regenerates tests/data/iq_lattice/: a tiny random llama model in each grid-based i-quant
(IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M), quantized by llama.cpp, and
llama.cpp's outputs on them, for tests/test_iq_lattice_llama_cpp.py; with `--set iq4`,
tests/data/iq4/: the same model in the non-linear 4-bit types IQ4_NL and IQ4_XS, for
tests/test_iq4_llama_cpp.py.

Usage (from the repo root, in the fixtures' environment: torch 2.13 CPU, transformers 5,
tokenizers, safetensors, gguf, numpy and llama-cpp-python 0.3.36, with its sdist unpacked for
the converter; none of this is a llamapy dependency):

    /tmp/moeenv/bin/python tools/make_iq_fixtures.py --sdist /tmp/moesd/llama_cpp_python-0.3.36 \
        [--work /tmp/iqw] [--set lattice|iq4]

Pipeline (the dense fixtures', tools/make_dense_fixtures.py, reused by import): the shared tiny
byte-level BPE -> a seeded random LlamaForCausalLM with rows of 256 (hidden 256, FFN 256, 2
layers, GQA 4/2 heads of 64, untied output; the dense fixtures' weight draw scaled by 0.5), so
every matrix takes 256-element super-blocks -> convert_hf_to_gguf.py --outtype f16 (kept in
--work only) -> llama_model_quantize with `pure` (every matrix, embeddings and output
included, in the file type's one type) and an importance matrix (the IQ1/IQ2 quantizers
refuse to run without one): seeded chi-square values for every matrix, handed over as
llama-quantize would -> recordings (tools/moe/record.py: greedy continuations, top-10 logits
per step, last-position logits, flash attention on and off) -> manifest.json. A fixture
generator, not part of llamapy.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import pathlib
import shutil
import sys
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "moe"))
sys.path.insert(0, str(HERE / "dense"))
sys.path.insert(0, str(HERE))

import make_moe_fixtures as moefx  # noqa: E402  (tensor types, versions, _run, _sha)
import tokenizer as moe_tok  # noqa: E402

REPO = HERE.parent
FAMILY = "llama_iq"
# The fixture sets: their folder under tests/data, and llama.h's llama_ftype ids:
# file type -> (id, the ggml type `pure` puts on every matrix). The same model, seed and
# importance matrix in each, so a set's files differ only in the type.
SETS = {
    "lattice": ("iq_lattice", {"IQ2_XXS": (19, "IQ2_XXS"), "IQ2_XS": (20, "IQ2_XS"), "IQ2_M": (29, "IQ2_S"),
                               "IQ3_XXS": (23, "IQ3_XXS"), "IQ3_S": (26, "IQ3_S"), "IQ1_S": (24, "IQ1_S"),
                               "IQ1_M": (31, "IQ1_M")}),
    "iq4": ("iq4", {"IQ4_NL": (25, "IQ4_NL"), "IQ4_XS": (30, "IQ4_XS")}),
}
SEED = 701
WEIGHT_SCALE = 0.5  # sqrt(64 / 256)


def build(out: pathlib.Path, base_tok: pathlib.Path) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import hf_models as moe_models

    n_vocab = moe_models._vocab("smollm3", base_tok, out)
    cfg = LlamaConfig(
        vocab_size=n_vocab, hidden_size=256, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, rms_norm_eps=1e-6,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=n_vocab - 1, pad_token_id=None)
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(cfg)
    moe_models.randomize(model, SEED)
    # The shared draw's W_STD (0.2) is sized for rows of 64; at 256 it makes every product
    # amplify by ~3, and llama.cpp's own flash off/on then moves logits by up to 0.8. Scaled
    # to the same gain as the 64-wide fixtures, 8-bit activation rounding moves them less.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(WEIGHT_SCALE)
    return moe_models._save(model, out, "smollm3", base_tok)


def convert(hf_dir: pathlib.Path, sdist: pathlib.Path, work: pathlib.Path) -> pathlib.Path:
    import os

    lc = sdist / "vendor" / "llama.cpp"
    env = dict(os.environ, PYTHONPATH=str(lc / "gguf-py"))
    (work / "logs").mkdir(exist_ok=True)
    f16 = work / f"{FAMILY}-f16.gguf"
    cmd = [sys.executable, str(HERE / "moe" / "tokpre_shim.py"), "llama-bpe",
           str(lc / "convert_hf_to_gguf.py"), str(hf_dir), "--outtype", "f16", "--outfile", str(f16)]
    moefx._run(cmd, work / "logs" / "convert.log", env)
    return f16


def imatrix(f16: pathlib.Path) -> dict:
    """name -> float32 importances for every matrix (seeded chi-square, as
    tools/record_quantize_fixtures.py draws them)."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(SEED)
    out = {}
    for t in gguf.GGUFReader(str(f16)).tensors:
        if len(t.shape) >= 2 and t.name.endswith(".weight"):
            out[t.name] = rng.chisquare(2, int(t.shape[0])).astype(np.float32)
    return out


def quantize(src: pathlib.Path, dst: pathlib.Path, ftype: int, values: dict) -> None:
    import llama_cpp
    import numpy as np

    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = ftype
    p.nthread = 2
    p.pure = True
    keep = []
    arr = (llama_cpp.llama_model_imatrix_data * (len(values) + 1))()
    for i, (k, v) in enumerate(values.items()):
        keep.append(k.encode())
        keep.append(np.ascontiguousarray(v, np.float32))
        arr[i].name = keep[-2]
        arr[i].data = keep[-1].ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        arr[i].size = v.size
    arr[len(values)].name = None
    p.imatrix = ctypes.cast(arr, type(p.imatrix))
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(p))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize(ftype {ftype}) rc={rc}")


def write_manifest(data: pathlib.Path) -> None:
    entries = {}
    for p in sorted(data.rglob("*")):
        if p.is_file() and p.name not in ("manifest.json", "README.md"):
            entries[str(p.relative_to(data))] = {"bytes": p.stat().st_size, "sha256": moefx._sha(p)}
    (data / "manifest.json").write_text(json.dumps(entries, indent=1) + "\n")


def main() -> None:
    import numpy as np

    import record as rec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", type=pathlib.Path, required=True)
    ap.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/iqw"))
    ap.add_argument("--set", choices=list(SETS), default="lattice")
    args = ap.parse_args()
    folder, ftypes = SETS[args.set]
    data = REPO / "tests" / "data" / folder
    args.work.mkdir(parents=True, exist_ok=True)
    base_tok = moe_tok.train(args.work)
    hf_dir = args.work / "hf" / FAMILY
    shutil.rmtree(hf_dir, ignore_errors=True)
    cfg = build(hf_dir, base_tok)
    f16 = convert(hf_dir, args.sdist, args.work)
    values = imatrix(f16)
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    files = {}
    for name, (ftype, _) in ftypes.items():
        dst = data / f"{FAMILY}-{name.lower()}.gguf"
        quantize(f16, dst, ftype, values)
        files[name] = dst.name
        print(f"  {name}: {dst.stat().st_size} bytes", flush=True)
    result = {"reference": "llama-cpp-python 0.3.36 (llama.cpp vendored in it), CPU, AVX2 build",
              "n_threads": rec.N_THREADS, "n_ctx": rec.N_CTX, "n_batch": rec.N_BATCH,
              "steps": rec.N_STEPS, "versions": moefx.versions(), "config": cfg,
              "matrix_type": {k: v[1] for k, v in ftypes.items()},
              "tensor_types": {k: moefx.gguf_tensor_types(data / v) for k, v in files.items()},
              "files": {}}
    arrays: dict = {}
    for q, name in files.items():
        try:
            result["files"][q] = {"file": name, **rec.record_file(str(data / name), q, arrays)}
        except Exception as e:  # kept as data: what llama.cpp refused
            result["files"][q] = {"file": name, "error": repr(e)}
            traceback.print_exc()
        print(f"  {q}: recorded", flush=True)
    np.savez_compressed(data / "logits.npz", **arrays)
    (data / "record.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    write_manifest(data)


if __name__ == "__main__":
    main()
