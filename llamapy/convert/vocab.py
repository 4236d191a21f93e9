"""The tokenizer of a Hugging Face decoder folder as GGUF metadata, the way llama.cpp's
``convert_hf_to_gguf.py`` writes it for byte-level BPE tokenizers (``tokenizer.json``):

- ``tokenizer.ggml.model`` = "gpt2", ``tokenizer.ggml.pre`` = the pre-tokenizer name found
  from the hash of how the tokenizer splits a fixed text (pretokenizer_hashes.py);
- ``tokens`` (one per id below the config's vocab_size; ids without a token are "[PAD<id>]",
  typed UNUSED), ``token_type`` (added tokens CONTROL when special or special-looking, else
  USER_DEFINED), ``merges``;
- special token ids (bos, eos, unk, sep, pad, cls, mask: from tokenizer_config.json's named
  tokens, then config.json's ``*_token_id``), ``add_bos_token`` / ``add_eos_token`` (from the
  post-processor, then tokenizer_config.json), the chat template (tokenizer_config.json, else
  chat_template.jinja / chat_template.json).

Not here: SentencePiece ``tokenizer.model`` vocabularies and WordPiece (bert.py); they are
refused with a clear error.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Union

from .pretokenizer_hashes import CHKTXT, PRE_BY_HASH

log = logging.getLogger("llamapy.convert")

# gguf's token types
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED = 1, 2, 3, 4, 5
SPECIAL_ROLES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")


@dataclass
class Vocab:
    model: str                      # tokenizer.ggml.model
    pre: str                        # tokenizer.ggml.pre
    tokens: List[str]
    types: List[int]
    merges: List[str]
    special_ids: Dict[str, int] = field(default_factory=dict)   # role -> id, in writing order
    add_special: Dict[str, bool] = field(default_factory=dict)  # "bos"/"eos"/"sep" -> add it?
    chat_template: Optional[Union[str, list]] = None


def _read_json(path: str) -> Optional[dict]:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def looks_special(text: str) -> bool:
    """Added tokens some models leave unmarked that llama.cpp still types CONTROL."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
            or (text.startswith("<unused") and text.endswith(">")))


def pre_tokenizer_hash(hf_dir: str) -> str:
    """sha256 of the ids ``tokenizer.json`` gives CHKTXT (special tokens added, as
    transformers' ``encode`` does). Needs the ``tokenizers`` package."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise RuntimeError("finding a BPE tokenizer's pre-tokenizer needs the 'tokenizers' package "
                           "(pip install tokenizers), or name it with tokenizer_pre= / --tokenizer-pre") from None
    ids = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json")).encode(CHKTXT).ids
    return hashlib.sha256(str(ids).encode()).hexdigest()


def _merges(tok_json: dict) -> List[str]:
    merges = tok_json.get("model", {}).get("merges") or []
    if merges and isinstance(merges[0], list):
        # the pair form (transformers >= 4.45) allows spaces inside a part; GGUF's "a b" form
        # cannot, so a space is stored shifted by 256 as llama.cpp does (U+0120, as byte-level BPE)
        return [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in pair)
                for pair in merges]
    if merges and not isinstance(merges[0], str):
        raise ValueError("tokenizer.json: unknown merges format")
    return list(merges)


def _special_ids_and_flags(hf_dir: str, tok_json: dict, tok_cfg: Optional[dict], cfg: dict,
                           n_vocab: int) -> tuple:
    """(role -> id, add flags) by llama.cpp's rules: tokenizer_config.json names the tokens
    (looked up among tokenizer.json's added tokens), config.json's ``*_token_id`` fill gaps;
    the post-processor says what is added, tokenizer_config.json's add_*_token where it is silent."""
    tok_cfg = dict(tok_cfg) if tok_cfg else None
    add: Dict[str, bool] = {}
    post = tok_json.get("post_processor") or {}
    for proc in post.get("processors", [post]) if post else []:
        kind = proc.get("type")
        if kind == "ByteLevel":
            add.setdefault("bos", False)
            add.setdefault("eos", False)
        elif kind in ("RobertaProcessing", "TemplateProcessing"):
            raise NotImplementedError(f"tokenizer.json's {kind} post-processor is not converted yet "
                                      "(only ByteLevel or none)")
    ids: Dict[str, int] = {}

    def put(role: str, tid: object) -> None:
        if not isinstance(tid, int) or isinstance(tid, bool):
            return
        if tid < 0:
            raise ValueError(f"invalid {role} token id {tid}")
        if tid < n_vocab and role not in ids:
            ids[role] = tid

    added = tok_json.get("added_tokens", [])
    if tok_cfg:
        if not tok_cfg.get("bos_token") and tok_cfg.get("cls_token"):
            tok_cfg["bos_token"] = tok_cfg["cls_token"]
        if not tok_cfg.get("eos_token") and tok_cfg.get("sep_token"):
            tok_cfg["eos_token"] = tok_cfg["sep_token"]
        for role in SPECIAL_ROLES:
            flag = tok_cfg.get(f"add_{role}_token")
            if isinstance(flag, bool) and role not in add:
                add[role] = flag
            entry = tok_cfg.get(f"{role}_token")
            text = entry.get("content") if isinstance(entry, dict) else entry
            if isinstance(text, str):
                put(role, next((t.get("id") for t in added if t.get("content") == text), None))
    for role in SPECIAL_ROLES:
        tid = cfg.get(f"{role}_token_id")
        if tid is None and isinstance(cfg.get("text_config"), dict):
            tid = cfg["text_config"].get(f"{role}_token_id")
        put(role, tid)
    return ids, add


def _chat_template(hf_dir: str, tok_cfg: Optional[dict]):
    if not tok_cfg:
        return None
    alt = None
    jinja = os.path.join(hf_dir, "chat_template.jinja")
    if os.path.isfile(jinja):
        with open(jinja, encoding="utf-8") as f:
            alt = f.read()
        extra_dir = os.path.join(hf_dir, "additional_chat_templates")
        if os.path.isdir(extra_dir):
            extras = sorted(n for n in os.listdir(extra_dir) if n.endswith(".jinja"))
            if extras:
                alt = [{"name": "default", "template": alt}]
                for n in extras:
                    with open(os.path.join(extra_dir, n), encoding="utf-8") as f:
                        alt.append({"name": n[:-6], "template": f.read()})
    else:
        alt = (_read_json(os.path.join(hf_dir, "chat_template.json")) or {}).get("chat_template")
    tmpl = tok_cfg.get("chat_template", alt)
    return tmpl if tmpl is None or isinstance(tmpl, (str, list)) else None


def read_bpe_vocab(hf_dir: str, cfg: dict, tokenizer_pre: Optional[str] = None) -> Vocab:
    """The byte-level BPE vocabulary of ``hf_dir`` (tokenizer.json). ``tokenizer_pre`` names
    the pre-tokenizer when its hash is not in llama.cpp's table (a new or custom tokenizer)."""
    tok_json = _read_json(os.path.join(hf_dir, "tokenizer.json"))
    if tok_json is None:
        if os.path.isfile(os.path.join(hf_dir, "tokenizer.model")):
            raise NotImplementedError(f"{hf_dir}: SentencePiece tokenizer.model vocabularies are not converted "
                                      "yet (only tokenizer.json byte-level BPE)")
        raise ValueError(f"{hf_dir} has no tokenizer.json")
    model = tok_json.get("model") or {}
    if model.get("type") != "BPE":
        raise NotImplementedError(f"tokenizer.json model type {model.get('type')!r} is not converted "
                                  "(only byte-level BPE)")
    tok_cfg = _read_json(os.path.join(hf_dir, "tokenizer_config.json"))

    # id -> text over the base vocab and the added tokens
    by_id: Dict[int, str] = {int(i): t for t, i in model.get("vocab", {}).items()}
    added = {int(t["id"]): t for t in tok_json.get("added_tokens", [])}
    for i, t in added.items():
        by_id[i] = t["content"]
    vocab_size = int(cfg.get("vocab_size") or len(by_id))
    if by_id and max(by_id) >= vocab_size:
        raise ValueError(f"the tokenizer has id {max(by_id)} but config.json's vocab_size is {vocab_size}")

    if tokenizer_pre is None:
        chk = pre_tokenizer_hash(hf_dir)
        tokenizer_pre = PRE_BY_HASH.get(chk)
        if tokenizer_pre is None:
            raise NotImplementedError(
                f"{hf_dir}: the BPE pre-tokenizer (hash {chk}) is not one llama.cpp knows; if it is a "
                "known family's, name it with --tokenizer-pre (e.g. llama-bpe, qwen2, gpt-4o)")
        log.info("pre-tokenizer %s (hash %s)", tokenizer_pre, chk)

    tokens: List[str] = []
    types: List[int] = []
    for i in range(vocab_size):
        text = by_id.get(i)
        if text is None:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
        elif i in added:
            if added[i].get("special") or looks_special(text):
                types.append(CONTROL)
            else:
                text = text.replace("\u2581", " ")  # user-defined tokens are stored pre-normalized
                types.append(USER_DEFINED)
            tokens.append(text)
        else:
            tokens.append(text)
            types.append(NORMAL)

    ids, add = _special_ids_and_flags(hf_dir, tok_json, tok_cfg, cfg, vocab_size)
    return Vocab("gpt2", tokenizer_pre, tokens, types, _merges(tok_json), ids, add,
                 _chat_template(hf_dir, tok_cfg))


def write_vocab(w, v: Vocab) -> None:
    """Puts ``v`` on the gguf.GGUFWriter ``w`` in llama.cpp's key order."""
    w.add_tokenizer_model(v.model)
    w.add_tokenizer_pre(v.pre)
    w.add_token_list(v.tokens)
    w.add_token_types(v.types)
    if v.merges:
        w.add_token_merges(v.merges)
    for role, tid in v.special_ids.items():
        getattr(w, f"add_{role}_token_id")(tid)
    for role, flag in v.add_special.items():
        adder = getattr(w, f"add_add_{role}_token", None)
        if adder is not None:
            adder(flag)
    if v.chat_template is not None:
        w.add_chat_template(v.chat_template)
