"""Random-weight GGUF models with real shapes, for speed measurements.

`write_llama_1b(path, mix)` writes a model with the exact shapes of
Llama-3.2-1B (hidden 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, vocab
128256, tied embeddings) in a Q4_K_M-like mix or all Q8_0. Weights are random
but well-formed blocks (a few rows quantized with llamapy, tiled), which is all
speed depends on. The vocabulary is a dummy byte-level BPE vocabulary so that
llama.cpp loads the file too.
"""
from __future__ import annotations

import os
import sys

import numpy as np

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB = 2048, 16, 32, 8, 8192, 128256


def _tiled(rng, type_name: str, n_rows: int, n_cols: int, scale: float = 0.02) -> np.ndarray:
    from llamapy import quantize

    base_rows = min(64, n_rows)
    base = quantize(rng.standard_normal((base_rows, n_cols)).astype(np.float32) * scale, type_name)
    reps = -(-n_rows // base_rows)
    return np.ascontiguousarray(np.tile(base, (reps, 1))[:n_rows])


def _byte_symbols() -> list:
    """GPT-2's printable stand-ins for the 256 byte values."""
    from llamapy._text import gpt2_byte_chars

    chars = gpt2_byte_chars()
    return [chars[b] for b in range(256)]


def add_dummy_vocab(w, n_vocab: int) -> None:
    """A dummy byte-level BPE vocabulary of n_vocab tokens: the 256 byte symbols (GPT-2's
    byte-to-unicode map), one merge, then filler tokens; BOS 1, EOS 2. Both engines load it."""
    byte_syms = _byte_symbols()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(byte_syms + ["ab"] + [f"t{i}" for i in range(n_vocab - len(byte_syms) - 1)])
    w.add_token_types([1] * n_vocab)
    w.add_token_merges(["a b"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def quantized_adder(w, rng):
    """add(name, type, n_rows, n_cols[, n_mat]): a tensor of random rows quantized and tiled
    (_tiled), n_mat stacked matrices for expert tensors."""
    import gguf

    def add(name: str, type_name: str, n_rows: int, n_cols: int, n_mat: int = 1) -> None:
        data = _tiled(rng, type_name, n_rows * n_mat, n_cols)
        if n_mat > 1:
            data = data.reshape(n_mat, n_rows, -1)
        w.add_tensor(name, data, raw_dtype=getattr(gguf.GGMLQuantizationType, type_name))  # (rows, row bytes)

    return add


def finish(w, path: str) -> str:
    """Writes the file under path + ".tmp" and renames it (never a half-written model)."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".tmp", path)
    return path


def write_llama_1b(path: str, mix: str = "Q4_K_M") -> str:
    import gguf

    if os.path.exists(path):
        return path
    rng = np.random.default_rng(0)
    if mix == "Q4_K_M":
        # llama.cpp's Q4_K_M: Q4_K everywhere except Q6_K for the (tied)
        # embedding/output and for attn_v / ffn_down in about half the layers.
        def pick(name: str, layer: int) -> str:
            if name in ("attn_v", "ffn_down") and (layer < 4 or layer % 3 == 2 or layer >= LAYERS - 4):
                return "Q6_K"
            return "Q4_K"
        embd_type = "Q6_K"
    elif mix == "Q8_0":
        def pick(name: str, layer: int) -> str:
            return "Q8_0"
        embd_type = "Q8_0"
    else:
        raise ValueError(f"unknown mix {mix}")

    w = gguf.GGUFWriter(path + ".tmp", "llama")
    w.add_name(f"random Llama-3.2-1B shapes {mix}")
    w.add_context_length(131072)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(VOCAB)
    w.add_file_type(15 if mix == "Q4_K_M" else 7)
    add_dummy_vocab(w, VOCAB)
    add = quantized_adder(w, rng)

    add("token_embd.weight", embd_type, VOCAB, HIDDEN)
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    kv = HIDDEN // HEADS * KV_HEADS
    for i in range(LAYERS):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        add(p + "attn_q.weight", pick("attn_q", i), HIDDEN, HIDDEN)
        add(p + "attn_k.weight", pick("attn_k", i), kv, HIDDEN)
        add(p + "attn_v.weight", pick("attn_v", i), kv, HIDDEN)
        add(p + "attn_output.weight", pick("attn_output", i), HIDDEN, HIDDEN)
        add(p + "ffn_gate.weight", pick("ffn_gate", i), FFN, HIDDEN)
        add(p + "ffn_up.weight", pick("ffn_up", i), FFN, HIDDEN)
        add(p + "ffn_down.weight", pick("ffn_down", i), HIDDEN, FFN)
    return finish(w, path)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "benchmarks/out/llama1b-q4_k_m.gguf"
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    print(write_llama_1b(out, sys.argv[2] if len(sys.argv) > 2 else "Q4_K_M"))
