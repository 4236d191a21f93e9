"""Regenerates tests/data/ternary/: llama.cpp's TQ1_0 / TQ2_0 quantizer on chosen rows, and a tiny
random llama quantized to TQ1_0 and TQ2_0 by llama.cpp with its greedy runs and logits.

Usage (from the repo root; the environment of tools/make_dense_fixtures.py: torch CPU,
transformers 5, tokenizers, safetensors, gguf, numpy and llama-cpp-python 0.3.36 with its sdist
unpacked for the converter; none of this is a llamapy dependency):

    python tools/make_ternary_fixtures.py --sdist /tmp/llama_cpp_python-0.3.36 [--work /tmp/ternw]
    python tools/make_ternary_fixtures.py --sdist ... --quantizer-only   # quantize_ref.npz alone

1. quantize_ref.npz: rows of 256-element blocks (Gaussian, ties at exactly half the block's
   largest magnitude, zeros, constants, one nonzero value, tiny and huge magnitudes, NaN and
   infinite inputs) and the
   bytes ggml_quantize_chunk (llama.cpp's quantize_row_tq1_0_ref / tq2_0_ref) makes of them,
   in llama-cpp-python's libggml-base (through tools/ggml_quantize_chunk.py).
2. A llama checkpoint (LlamaForCausalLM: 2 layers, hidden 256, FFN 512, GQA 4/2 heads of 64,
   untied output; every matrix row a multiple of 256 elements so the ternary types apply),
   seeded random weights as the MoE fixtures draw them (tools/moe/hf_models.py), the shared
   tiny BPE; converted to F16 by convert_hf_to_gguf.py (kept in --work only), quantized by
   llama_model_quantize to TQ1_0 and TQ2_0 (token embeddings Q4_K, output Q6_K: llama.cpp's
   rules), and recorded by tools/moe/record.py (greedy ids, top-10 logits, noise, flash off).
A fixture generator, not part of llamapy.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import pathlib
import shutil
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "moe"))
sys.path.insert(0, str(HERE))

import hf_models as moe_models  # noqa: E402  (randomize, _vocab, _save)
import make_moe_fixtures as moefx  # noqa: E402  (_run, versions, _sha, gguf_tensor_types)
import tokenizer as moe_tok  # noqa: E402
from ggml_quantize_chunk import quantize_rows  # noqa: E402

REPO = HERE.parent
DATA = REPO / "tests" / "data" / "ternary"
GGML_TYPE = {"TQ1_0": 34, "TQ2_0": 35}
FTYPE = {"TQ1_0": 36, "TQ2_0": 37}  # llama_ftype: LLAMA_FTYPE_MOSTLY_TQ1_0 / TQ2_0
QK_K = 256


def quantizer_inputs() -> np.ndarray:
    """(n_blocks, 256) float32 rows meant to reach every branch of the reference quantizer."""
    rng = np.random.default_rng(34)
    blocks = [rng.standard_normal(QK_K) * s for s in (1.0, 0.02, 300.0)]
    for _ in range(3):  # values at exactly +-d/2, +-d and 0: lround's halves away from zero
        d = np.float32(rng.uniform(0.5, 2.0))
        b = rng.choice(np.array([-1, -0.5, 0, 0.5, 1], np.float32), QK_K) * d
        b[0] = d
        blocks.append(b)
    blocks.append(np.zeros(QK_K))
    blocks.append(np.full(QK_K, -0.75))
    one = np.zeros(QK_K)
    one[137] = 2.5
    blocks.append(one)
    blocks.append(rng.standard_normal(QK_K) * 1e-6)    # scale below fp16's normal range
    blocks.append(rng.standard_normal(QK_K) * 1e-9)    # below its subnormals: d rounds to 0
    blocks.append(rng.standard_normal(QK_K) * 4e4)     # largest magnitude past 65504: d = inf
    sparse = rng.standard_normal(QK_K) * (rng.random(QK_K) < 0.1)
    blocks.append(sparse)
    for bad in (np.nan, np.inf):  # not weights, but the bytes must still be llama.cpp's
        b = rng.standard_normal(QK_K)
        b[[17, 200]] = bad
        blocks.append(b)
    blocks += [rng.standard_normal(QK_K) * rng.uniform(0.01, 10) for _ in range(13)]
    return np.stack(blocks).astype(np.float32)


def record_quantizer() -> None:
    x = quantizer_inputs()
    out = {"x": x}
    for name, t in GGML_TYPE.items():
        out[name] = np.frombuffer(quantize_rows(t, x), np.uint8)
    np.savez_compressed(DATA / "quantize_ref.npz", **out)


def build_llama(out: pathlib.Path, base_tok: pathlib.Path, seed: int = 701) -> dict:
    from transformers import LlamaConfig, LlamaForCausalLM
    import torch

    n_vocab = moe_models._vocab("smollm3", base_tok, out)
    cfg = LlamaConfig(
        vocab_size=n_vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, rms_norm_eps=1e-6,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=n_vocab - 1, pad_token_id=None)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    moe_models.randomize(model, seed)
    return moe_models._save(model, out, "smollm3", base_tok)


def quantize(src: pathlib.Path, dst: pathlib.Path, ft: str) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPE[ft]
    params.nthread = 1
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({ft}) rc={rc}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", type=pathlib.Path, required=True)
    ap.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/ternw"))
    ap.add_argument("--quantizer-only", action="store_true", help="re-record quantize_ref.npz only")
    args = ap.parse_args()
    if args.quantizer_only:
        record_quantizer()
        write_manifest()
        return
    args.work.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(DATA, ignore_errors=True)
    DATA.mkdir(parents=True)
    record_quantizer()

    import record as rec

    base_tok = moe_tok.train(args.work)
    hf_dir = args.work / "hf" / "llama"
    shutil.rmtree(hf_dir, ignore_errors=True)
    cfg = build_llama(hf_dir, base_tok)
    lc = args.sdist / "vendor" / "llama.cpp"
    f16 = args.work / "llama-f16.gguf"
    env = dict(__import__("os").environ, PYTHONPATH=str(lc / "gguf-py"))
    moefx._run([sys.executable, str(HERE / "moe" / "tokpre_shim.py"), "llama-bpe", str(lc / "convert_hf_to_gguf.py"),
                str(hf_dir), "--outtype", "f16", "--outfile", str(f16)], args.work / "convert.log", env)
    files = {}
    for ft in FTYPE:
        dst = DATA / f"llama-{ft.lower()}.gguf"
        quantize(f16, dst, ft)
        files[ft] = dst.name
    result = {"reference": "llama-cpp-python 0.3.36 (llama.cpp vendored in it), CPU, AVX2 build",
              "n_threads": rec.N_THREADS, "n_ctx": rec.N_CTX, "n_batch": rec.N_BATCH, "steps": rec.N_STEPS,
              "versions": moefx.versions(), "config": cfg, "files": {},
              "tensor_types": {k: moefx.gguf_tensor_types(DATA / v) for k, v in files.items()}}
    arrays: dict = {}
    for ft, name in files.items():
        result["files"][ft] = {"file": name, **rec.record_file(str(DATA / name), ft, arrays)}
        print(f"  {ft}: recorded", flush=True)
    np.savez_compressed(DATA / "logits.npz", **arrays)
    (DATA / "record.json").write_text(json.dumps(result, indent=1, ensure_ascii=False, default=str) + "\n")
    write_manifest()


def write_manifest() -> None:
    manifest = {p.name: {"bytes": p.stat().st_size, "sha256": moefx._sha(p)}
                for p in sorted(DATA.iterdir()) if p.name != "manifest.json"}
    (DATA / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
