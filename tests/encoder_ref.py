"""Tiny seeded encoder models (bert, nomic-bert) as GGUF files, with a small
WordPiece vocabulary, and the numpy reference forward pass and pooling they
are held against (tests/test_encoders.py). Shares the numerics helpers of
model_ref.py (GELU through F16, RoPE, activation rounding).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

import model_ref as R

from tiny_gguf import add_common_hparams, add_weight, finish

# A WordPiece vocabulary in llama.cpp's GGUF layout: word-initial pieces carry
# U+2581, continuations ("##x" in vocab.txt) are bare, specials unchanged.
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "fast", "hello", "world", "un", "believ", "able",
         "play", "ing", "ed", ",", ".", "!", "?", "'", "s", "caf", "e", "new", "york", "bank", "river"]
CONTINUATIONS = ["ing", "ed", "s", "able", "believ", "e", "ly", "er"]


def vocab_tokens() -> tuple[list[str], list[int]]:
    tokens = list(SPECIALS) + ["\u2581" + w for w in WORDS] + CONTINUATIONS
    types = [3] * len(SPECIALS) + [1] * (len(WORDS) + len(CONTINUATIONS))
    return tokens, types


@dataclass(frozen=True)
class EncoderConfig:
    arch: str = "bert"
    n_embd: int = 64
    n_head: int = 4
    n_ff: int = 128
    n_layer: int = 2
    n_ctx_train: int = 48
    n_types: int = 2
    eps: float = 1e-12
    rope_base: float = 1000.0
    pooling: int = 1

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def n_vocab(self) -> int:
        return len(vocab_tokens()[0])


def make_weights(cfg: EncoderConfig, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    E, F = cfg.n_embd, cfg.n_ff

    def m(rows, cols, scale=0.15):
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def v(n, center=0.0, scale=0.1):
        return (center + rng.standard_normal(n) * scale).astype(np.float32)

    w = {"token_embd.weight": m(cfg.n_vocab, E, 0.5), "token_types.weight": m(cfg.n_types, E, 0.2),
         "token_embd_norm.weight": v(E, 1.0), "token_embd_norm.bias": v(E)}
    if cfg.arch == "bert":
        w["position_embd.weight"] = m(cfg.n_ctx_train, E, 0.2)
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        if cfg.arch == "bert":
            for t in ("q", "k", "v"):
                w[p + f"attn_{t}.weight"] = m(E, E)
                w[p + f"attn_{t}.bias"] = v(E)
            w[p + "attn_output.bias"] = v(E)
            w[p + "ffn_up.bias"] = v(F)
            w[p + "ffn_down.bias"] = v(E)
            w[p + "attn_output_norm.bias"] = v(E)
            w[p + "layer_output_norm.bias"] = v(E)
        else:
            w[p + "attn_qkv.weight"] = m(3 * E, E)
            w[p + "ffn_gate.weight"] = m(F, E)
        w[p + "attn_output.weight"] = m(E, E)
        w[p + "attn_output_norm.weight"] = v(E, 1.0)
        w[p + "ffn_up.weight"] = m(F, E)
        w[p + "ffn_down.weight"] = m(E, F)
        w[p + "layer_output_norm.weight"] = v(E, 1.0)
    return w


def write_gguf(path: Path, cfg: EncoderConfig, weights: dict[str, np.ndarray], wtype: str = "F32",
               extra_kv: dict | None = None) -> None:
    a = cfg.arch
    wr = gguf.GGUFWriter(str(path), a)
    add_common_hparams(wr, a, n_ctx_train=cfg.n_ctx_train, n_embd=cfg.n_embd, n_layer=cfg.n_layer, n_ff=cfg.n_ff,
                       n_head=cfg.n_head)
    wr.add_float32(f"{a}.attention.layer_norm_epsilon", cfg.eps)
    wr.add_bool(f"{a}.attention.causal", False)
    if cfg.pooling >= 0:
        wr.add_uint32(f"{a}.pooling_type", cfg.pooling)
    if a == "nomic-bert":
        wr.add_float32(f"{a}.rope.freq_base", cfg.rope_base)
    tokens, types = vocab_tokens()
    wr.add_tokenizer_model("bert")
    wr.add_token_list(tokens)
    wr.add_token_types(types)
    wr.add_uint32("tokenizer.ggml.token_type_count", cfg.n_types)
    wr.add_uint32("tokenizer.ggml.bos_token_id", 2)
    wr.add_uint32("tokenizer.ggml.seperator_token_id", 3)
    wr.add_uint32("tokenizer.ggml.unknown_token_id", 1)
    wr.add_uint32("tokenizer.ggml.padding_token_id", 0)
    wr.add_uint32("tokenizer.ggml.mask_token_id", 4)
    for k, val in (extra_kv or {}).items():
        wr.add_bool(k, val) if isinstance(val, bool) else wr.add_uint32(k, val)
    for name, arr in weights.items():
        t = "F32" if arr.ndim == 1 or name in ("position_embd.weight", "token_types.weight") else wtype
        add_weight(wr, name, arr, t)
    finish(wr)


def stored(weights: dict[str, np.ndarray], wtype: str) -> dict[str, np.ndarray]:
    """The weights as the engine reads them back."""
    out = {}
    for name, arr in weights.items():
        t = "F32" if arr.ndim == 1 or name in ("position_embd.weight", "token_types.weight") else wtype
        out[name] = R.as_stored(arr, t).astype(np.float64)
    return out


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + (0.0 if b is None else b)


def forward(cfg: EncoderConfig, w: dict[str, np.ndarray], tokens, wtype: str = "F32") -> np.ndarray:
    """Final hidden states (n, n_embd) of one sequence, attending to all of it."""
    tokens = np.asarray(tokens)
    n, E, H, D = len(tokens), cfg.n_embd, cfg.n_head, cfg.head_dim
    pos = np.arange(n)
    x = w["token_embd.weight"][tokens] + w["token_types.weight"][0]
    if cfg.arch == "bert":
        x = x + w["position_embd.weight"][pos]
    x = layer_norm(x, w["token_embd_norm.weight"], w.get("token_embd_norm.bias"), cfg.eps)
    for il in range(cfg.n_layer):
        p = f"blk.{il}."

        def lin(inp, name):
            y = R.matmul(inp, w[p + name + ".weight"], wtype)
            b = w.get(p + name + ".bias")
            return y if b is None else y + b

        if cfg.arch == "bert":
            q, k, v = lin(x, "attn_q"), lin(x, "attn_k"), lin(x, "attn_v")
        else:
            qkv = lin(x, "attn_qkv")
            q, k, v = qkv[:, :E], qkv[:, E:2 * E], qkv[:, 2 * E:]
        q, k, v = (t.reshape(n, H, D) for t in (q, k, v))
        if cfg.arch == "nomic-bert":
            q = R.rope(q, pos, cfg.rope_base, D, neox=True)
            k = R.rope(k, pos, cfg.rope_base, D, neox=True)
        s = np.einsum("thd,jhd->htj", q, k) / np.sqrt(D)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        att = np.einsum("htj,jhd->thd", s, v).reshape(n, E)
        x = layer_norm(x + lin(att, "attn_output"), w[p + "attn_output_norm.weight"],
                       w.get(p + "attn_output_norm.bias"), cfg.eps)
        if cfg.arch == "bert":
            h = R.gelu_f16(lin(x, "ffn_up"))
        else:
            h = R.silu(lin(x, "ffn_gate")) * lin(x, "ffn_up")
        x = layer_norm(x + lin(h, "ffn_down"), w[p + "layer_output_norm.weight"],
                       w.get(p + "layer_output_norm.bias"), cfg.eps)
    return x


def pool(h: np.ndarray, pooling: int) -> np.ndarray:
    """llama.cpp's pooling of one sequence's rows: 1 mean, 2 first (cls), 3 last."""
    return {1: lambda: h.mean(0), 2: lambda: h[0], 3: lambda: h[-1]}[pooling]()


def make_model(root: Path, arch: str, wtype: str = "F32", pooling: int = 1, seed: int = 0):
    cfg = EncoderConfig(arch=arch, pooling=pooling)
    weights = make_weights(cfg, seed)
    path = root / f"tiny-{arch}-{wtype}-p{pooling}.gguf"
    if not path.exists():
        write_gguf(path, cfg, weights, wtype)
    return path, cfg, stored(weights, wtype)
