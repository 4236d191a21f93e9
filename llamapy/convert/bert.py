"""Hugging Face BERT-family checkpoints (all-MiniLM, bge, e5, ...) to GGUF.

Writes what llama.cpp's ``convert_hf_to_gguf.py`` writes for ``BertModel``
(architecture ``bert``), so llama.cpp reads the result as well:

- metadata: ``bert.context_length`` (max_position_embeddings),
  ``embedding_length``, ``feed_forward_length``, ``block_count``,
  ``attention.head_count``, ``attention.layer_norm_epsilon``,
  ``attention.causal`` = false, ``pooling_type`` (from a sentence-transformers
  ``modules.json`` + pooling config, when the folder has them);
- tokenizer: ``tokenizer.ggml.model`` = "bert" with the "phantom space" vocab
  (word-initial pieces prefixed with U+2581, ``##`` continuations bare,
  special tokens unchanged and typed CONTROL), ``token_type_count`` and the
  special token ids (gguf.SpecialVocab); plus llamapy's
  ``tokenizer.wordpiece.lowercase`` / ``strip_accents`` so cased models
  tokenize right (llama.cpp ignores these keys);
- tensors: token_embd, position_embd, token_types, token_embd_norm and per
  block attn_q/k/v, attn_output, attn_output_norm, ffn_up, ffn_down,
  layer_output_norm (weights and biases). Vectors, position and token-type
  embeddings stay F32; matrices take the output type (F32, F16 or Q8_0).

Not here: the safetensors reader (safetensors.py), other architectures.
"""
from __future__ import annotations

import json
import logging
import os
import re
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from .decoder import part_writer
from .safetensors import load_safetensors

OUTTYPES = ("f32", "f16", "q8_0")

# HF name (after dropping "bert." and renaming gamma/beta) -> GGUF name.
_TENSOR_MAP = [
    (r"embeddings\.word_embeddings\.weight", "token_embd.weight"),
    (r"embeddings\.position_embeddings\.weight", "position_embd.weight"),
    (r"embeddings\.token_type_embeddings\.weight", "token_types.weight"),
    (r"embeddings\.LayerNorm\.(weight|bias)", "token_embd_norm.{0}"),
    (r"encoder\.layer\.(\d+)\.attention\.self\.query\.(weight|bias)", "blk.{0}.attn_q.{1}"),
    (r"encoder\.layer\.(\d+)\.attention\.self\.key\.(weight|bias)", "blk.{0}.attn_k.{1}"),
    (r"encoder\.layer\.(\d+)\.attention\.self\.value\.(weight|bias)", "blk.{0}.attn_v.{1}"),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.(weight|bias)", "blk.{0}.attn_output.{1}"),
    (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.(weight|bias)", "blk.{0}.attn_output_norm.{1}"),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.(weight|bias)", "blk.{0}.ffn_up.{1}"),
    (r"encoder\.layer\.(\d+)\.output\.dense\.(weight|bias)", "blk.{0}.ffn_down.{1}"),
    (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.(weight|bias)", "blk.{0}.layer_output_norm.{1}"),
]
_SKIPPED = re.compile(r"(embeddings\.position_ids|pooler\..*|cls\..*)")
_KEEP_F32 = ("position_embd.weight", "token_types.weight")

# gguf's token types
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED = 1, 2, 3, 4, 5


def gguf_tensor_name(hf_name: str) -> Optional[str]:
    """The GGUF name of a checkpoint tensor; None for tensors an embedding
    model does not use (pooler, MLM head, position ids)."""
    name = hf_name[5:] if hf_name.startswith("bert.") else hf_name
    if name.endswith(".gamma"):
        name = name[:-6] + ".weight"
    elif name.endswith(".beta"):
        name = name[:-5] + ".bias"
    if _SKIPPED.fullmatch(name):
        return None
    for pattern, out in _TENSOR_MAP:
        m = re.fullmatch(pattern, name)
        if m:
            return out.format(*m.groups())
    raise NotImplementedError(f"tensor {hf_name!r} has no GGUF name (is this a plain BERT checkpoint?)")


def _read_json(path: str) -> Optional[dict]:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_checkpoint(hf_dir: str) -> Dict[str, np.ndarray]:
    """Tensors of model.safetensors (or its shards), else pytorch_model.bin
    (which needs torch)."""
    single = os.path.join(hf_dir, "model.safetensors")
    if os.path.isfile(single):
        return load_safetensors(single)
    index = _read_json(os.path.join(hf_dir, "model.safetensors.index.json"))
    if index is not None:
        out: Dict[str, np.ndarray] = {}
        for shard in sorted(set(index.get("weight_map", {}).values())):
            out.update(load_safetensors(os.path.join(hf_dir, shard)))
        return out
    binary = os.path.join(hf_dir, "pytorch_model.bin")
    if os.path.isfile(binary):
        try:
            import torch  # type: ignore
        except ImportError:
            raise RuntimeError(f"{binary} is a pickled PyTorch checkpoint: reading it needs torch "
                               "(pip install torch), or convert it to model.safetensors first") from None
        state = torch.load(binary, map_location="cpu", weights_only=True)
        return {k: v.float().numpy() for k, v in state.items()}
    raise FileNotFoundError(f"{hf_dir} has no model.safetensors, model.safetensors.index.json or pytorch_model.bin")


def read_vocab(hf_dir: str, vocab_size: int) -> Tuple[List[str], List[int], bool, bool, Dict[str, int]]:
    """(GGUF token texts, token types, lowercase, strip_accents, special ids
    by role: cls, sep, unk, pad, mask) from tokenizer.json or vocab.txt +
    tokenizer_config.json."""
    tok_json = _read_json(os.path.join(hf_dir, "tokenizer.json"))
    tok_cfg = _read_json(os.path.join(hf_dir, "tokenizer_config.json")) or {}
    vocab_txt = os.path.join(hf_dir, "vocab.txt")
    by_id: Dict[int, str] = {}
    if tok_json is not None and tok_json.get("model", {}).get("type") == "WordPiece":
        for text, i in tok_json["model"]["vocab"].items():
            by_id[int(i)] = text
    elif os.path.isfile(vocab_txt):
        with open(vocab_txt, encoding="utf-8") as f:
            for i, line in enumerate(f):
                by_id[i] = line.rstrip("\n")
    else:
        raise FileNotFoundError(f"{hf_dir} has neither a WordPiece tokenizer.json nor vocab.txt")

    # Special tokens: added tokens marked special, else the config's named ones.
    special: Dict[int, bool] = {}
    if tok_json is not None:
        for t in tok_json.get("added_tokens", []):
            by_id.setdefault(int(t["id"]), t["content"])
            special[int(t["id"])] = bool(t.get("special", False))
    for i, t in (tok_cfg.get("added_tokens_decoder") or {}).items():
        by_id.setdefault(int(i), t["content"])
        special.setdefault(int(i), bool(t.get("special", False)))
    index = {text: i for i, text in by_id.items()}
    roles: Dict[str, int] = {}
    for role, default in (("unk", "[UNK]"), ("sep", "[SEP]"), ("pad", "[PAD]"), ("cls", "[CLS]"), ("mask", "[MASK]")):
        text = tok_cfg.get(role + "_token", default)
        if isinstance(text, dict):
            text = text.get("content")
        if text in index:
            special[index[text]] = True
            roles[role] = index[text]

    n = max(vocab_size, max(by_id) + 1)
    tokens: List[str] = []
    types: List[int] = []
    for i in range(n):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(_UNUSED)
            continue
        text = by_id[i]
        if i in special:
            tokens.append(text)
            types.append(_CONTROL if special[i] else _USER_DEFINED)
        elif text.startswith("##"):
            tokens.append(text[2:])
            types.append(_NORMAL)
        else:
            tokens.append("\u2581" + text)
            types.append(_NORMAL)

    norm = (tok_json or {}).get("normalizer") or {}
    if norm.get("type") == "BertNormalizer":
        lowercase = bool(norm.get("lowercase", True))
        strip = norm.get("strip_accents")
    else:
        lowercase = bool(tok_cfg.get("do_lower_case", True))
        strip = tok_cfg.get("strip_accents")
    strip_accents = lowercase if strip is None else bool(strip)
    return tokens, types, lowercase, strip_accents, roles


def read_pooling(hf_dir: str) -> Optional[int]:
    """llama.cpp's pooling type from a sentence-transformers folder, or None."""
    modules = _read_json(os.path.join(hf_dir, "modules.json"))
    if not modules:
        return None
    for m in modules:
        if m.get("type") == "sentence_transformers.models.Pooling":
            cfg = _read_json(os.path.join(hf_dir, m.get("path", ""), "config.json")) or {}
            if cfg.get("pooling_mode_mean_tokens"):
                return 1
            if cfg.get("pooling_mode_cls_token"):
                return 2
            if cfg.get("pooling_mode_lasttoken"):
                return 3
            raise NotImplementedError(f"pooling config {cfg} is not supported (mean, cls or last token)")
    return None


def _tensor_for(name: str, data: np.ndarray, outtype: str):
    """(array, raw_dtype or None) as the GGUF writer wants it."""
    import gguf

    x = np.ascontiguousarray(data, dtype=np.float32)
    if x.ndim <= 1 or name in _KEEP_F32 or outtype == "f32":
        return x, None
    if outtype == "q8_0" and x.shape[-1] % 32 == 0:
        return gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0
    return x.astype(np.float16), None


def convert_bert(hf_dir: str, out_path: str, outtype: str = "f16",
                 log: Callable[[str], None] = lambda s: None) -> str:
    """Convert the Hugging Face BERT folder ``hf_dir`` to ``out_path``."""
    import gguf

    if outtype not in OUTTYPES:
        raise ValueError(f"outtype must be one of {', '.join(OUTTYPES)}, got {outtype!r}")
    cfg = _read_json(os.path.join(hf_dir, "config.json"))
    if cfg is None:
        raise FileNotFoundError(f"{hf_dir} has no config.json")
    arch = (cfg.get("architectures") or [""])[0]
    if cfg.get("model_type") != "bert" and arch not in ("BertModel", "BertForMaskedLM"):
        raise NotImplementedError(f"model_type {cfg.get('model_type')!r} ({arch or 'no architecture'}) is not a "
                                  "BERT checkpoint; only the bert family converts")
    act = cfg.get("hidden_act", "gelu")
    if act not in ("gelu", "gelu_new", "gelu_pytorch_tanh"):
        raise NotImplementedError(f"hidden_act {act!r} is not supported (gelu)")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise NotImplementedError("only absolute position embeddings are supported")

    tensors = load_checkpoint(hf_dir)
    mapped: Dict[str, np.ndarray] = {}
    for hf_name, data in tensors.items():
        name = gguf_tensor_name(hf_name)
        if name is not None:
            mapped[name] = data
    n_layer = int(cfg["num_hidden_layers"])
    needed = ["token_embd.weight", "token_embd_norm.weight"] + [
        f"blk.{i}.{t}.weight" for i in range(n_layer)
        for t in ("attn_q", "attn_k", "attn_v", "attn_output", "attn_output_norm", "ffn_up", "ffn_down",
                  "layer_output_norm")]
    missing = [n for n in needed if n not in mapped]
    if missing:
        raise ValueError(f"checkpoint lacks {len(missing)} tensors, e.g. {missing[0]}")

    tokens, types, lowercase, strip_accents, roles = read_vocab(hf_dir, int(cfg.get("vocab_size", 0)))
    if len(tokens) != mapped["token_embd.weight"].shape[0]:
        raise ValueError(f"the vocabulary has {len(tokens)} tokens but the embedding matrix "
                         f"{mapped['token_embd.weight'].shape[0]} rows")
    pooling = read_pooling(hf_dir)

    # OUT.part renamed at the end, removed on error (decoder.part_writer)
    with part_writer(out_path, "bert") as w:
        name = os.path.basename(os.path.normpath(cfg.get("_name_or_path") or hf_dir))
        w.add_name(name)
        w.add_file_type({"f32": 0, "f16": 1, "q8_0": 7}[outtype])
        w.add_context_length(int(cfg.get("max_position_embeddings", 512)))
        w.add_embedding_length(int(cfg["hidden_size"]))
        w.add_feed_forward_length(int(cfg["intermediate_size"]))
        w.add_block_count(n_layer)
        w.add_head_count(int(cfg["num_attention_heads"]))
        w.add_layer_norm_eps(float(cfg.get("layer_norm_eps", 1e-12)))
        w.add_causal_attention(False)
        if pooling is not None:
            w.add_pooling_type(gguf.PoolingType(pooling))
        w.add_tokenizer_model("bert")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_type_count(int(cfg.get("type_vocab_size", 1)))
        w.add_bool("tokenizer.wordpiece.lowercase", lowercase)
        w.add_bool("tokenizer.wordpiece.strip_accents", strip_accents)
        vocab_log = logging.getLogger("gguf.vocab")  # it warns that llama.cpp has no "cls" key; neither do we
        level = vocab_log.level
        vocab_log.setLevel(logging.ERROR)
        try:
            special = gguf.SpecialVocab(hf_dir, load_merges=False, n_vocab=len(tokens))
            # Without tokenizer.json it may find none: fill in what vocab.txt names ([CLS] is BERT's BOS).
            for role, key in (("bos", "cls"), ("sep", "sep"), ("unk", "unk"), ("pad", "pad"), ("mask", "mask")):
                if key in roles:
                    special.special_token_ids.setdefault(role, roles[key])
            special.add_to_gguf(w, quiet=True)
        finally:
            vocab_log.setLevel(level)
        for tname in sorted(mapped, key=_tensor_order):
            data, raw_dtype = _tensor_for(tname, mapped[tname], outtype)
            if raw_dtype is None:
                w.add_tensor(tname, data)
            else:
                w.add_tensor(tname, data, raw_dtype=raw_dtype)
            log(f"{tname:32s} {str(tuple(mapped[tname].shape)):16s} -> {raw_dtype.name if raw_dtype else data.dtype}")
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
    return out_path


def _tensor_order(name: str):
    m = re.match(r"blk\.(\d+)\.", name)
    return (1, int(m.group(1)), name) if m else (0, 0, name)
