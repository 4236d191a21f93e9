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

And for SentencePiece folders (``tokenizer.model``, preferred when present, as llama.cpp does):
``tokenizer.ggml.model`` = "llama", pre "default", the pieces with their scores and types
(user-defined pieces typed NORMAL, as the reference does), added tokens from added_tokens.json
and tokenizer_config.json's added_tokens_decoder (score -1000), no merges.

Not here: WordPiece (bert.py), SentencePiece-style tokenizer.json without tokenizer.model,
post-processors other than ByteLevel / Roberta / simple TemplateProcessing: refused clearly.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Union

from .pretokenizer_hashes import CHKTXT, PRE_BY_HASH
from .sentencepiece_model import read_pieces

log = logging.getLogger("llamapy.convert")

# gguf's token types
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPECIAL_ROLES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")


@dataclass
class Vocab:
    model: str                      # tokenizer.ggml.model
    pre: Optional[str]              # tokenizer.ggml.pre (None: not written, as for Gemma 4)
    tokens: List[str]
    types: List[int]
    merges: List[str]
    scores: Optional[List[float]]   # SentencePiece only
    special_ids: Dict[str, int] = field(default_factory=dict)   # role -> id, in writing order
    add_special: Dict[str, bool] = field(default_factory=dict)  # "bos"/"eos"/"sep" -> add it?
    chat_template: Optional[Union[str, list]] = None
    add_space_prefix: Optional[bool] = None         # tokenizer.ggml.add_space_prefix, when a family sets it


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


def _template_flags(proc: dict, tok_cfg: Optional[dict], add: Dict[str, bool]) -> None:
    """What a TemplateProcessing post-processor adds around one sequence: a leading BOS / CLS,
    a trailing EOS, a separator between a pair. Fills tokenizer_config's names where it lacks
    them (as llama.cpp does); templates it cannot read are refused rather than guessed."""
    cfg = tok_cfg if tok_cfg is not None else {}
    single, pair = proc.get("single", []), proc.get("pair", [])
    bos, cls, eos, sep = (cfg.get(k) for k in ("bos_token", "cls_token", "eos_token", "sep_token"))
    lead = single[0].get("SpecialToken", {}).get("id") if len(single) > 1 else None
    last = single[-1].get("SpecialToken", {}).get("id") if len(single) > 1 else None
    if lead:
        if tok_cfg is None:
            bos = lead
        elif lead not in (bos, cls):
            if not bos:
                cfg["bos_token"] = bos = lead
            if not cls:
                cfg["cls_token"] = cls = lead
        add["bos"] = lead in (bos, cls)
    if last:
        if tok_cfg is None:
            eos = last
        elif last != eos:
            raise NotImplementedError(f"tokenizer.json's template ends with {last!r}, not the EOS token {eos!r}")
        add["eos"] = last == eos
    if pair:
        start = 1 if lead and pair[0].get("SpecialToken", {}).get("id") == lead else 0
        stop = len(pair) - 1 if last and pair[-1].get("SpecialToken", {}).get("id") == last else len(pair)
        mid = pair[start:stop]
        seq_ids = [m.get("Sequence", {}).get("id") for m in mid]
        if len(mid) >= 2 and seq_ids[0] == "A" and seq_ids[-1] == "B":
            between = [m.get("SpecialToken", {}).get("id") for m in mid[1:-1]]
            if between and None in between:
                raise NotImplementedError("tokenizer.json's pair template has something other than special tokens "
                                          "between the sequences")
            add_sep = bool(between) and between[0] in (sep, eos) and (len(between) > 1 or not last)
            add["sep"] = add_sep
            if add_sep and not sep and tok_cfg is not None:
                cfg["sep_token"] = eos
        elif mid:
            raise NotImplementedError("tokenizer.json's pair template is not 'A ... B'")


def _special_ids_and_flags(hf_dir: str, tok_json: Optional[dict], tok_cfg: Optional[dict], cfg: dict,
                           n_vocab: int) -> tuple:
    """(role -> id, add flags) by llama.cpp's rules: tokenizer_config.json names the tokens
    (looked up among tokenizer.json's added tokens), config.json's ``*_token_id`` fill gaps;
    the post-processor says what is added, tokenizer_config.json's add_*_token where it is silent."""
    tok_cfg = dict(tok_cfg) if tok_cfg else None
    add: Dict[str, bool] = {}
    post = (tok_json or {}).get("post_processor") or {}
    if tok_json is not None and tok_cfg is not None:
        if not tok_cfg.get("bos_token") and tok_cfg.get("cls_token"):
            tok_cfg["bos_token"] = tok_cfg["cls_token"]
        if not tok_cfg.get("eos_token") and tok_cfg.get("sep_token"):
            tok_cfg["eos_token"] = tok_cfg["sep_token"]
    for proc in post.get("processors", [post]) if post else []:
        kind = proc.get("type")
        if kind == "ByteLevel":
            add.setdefault("bos", False)
            add.setdefault("eos", False)
        elif kind == "TemplateProcessing":
            _template_flags(proc, tok_cfg, add)
        elif kind == "RobertaProcessing":
            add.update(bos=True, eos=True, sep=True)
            if tok_cfg is not None:
                tok_cfg.setdefault("cls_token", proc.get("cls", [tok_cfg.get("bos_token")])[0])
                tok_cfg.setdefault("sep_token", proc.get("sep", [tok_cfg.get("eos_token")])[0])
        else:
            raise NotImplementedError(f"tokenizer.json's {kind} post-processor is not converted")
    ids: Dict[str, int] = {}

    def put(role: str, tid: object) -> None:
        if not isinstance(tid, int) or isinstance(tid, bool):
            return
        if tid < 0:
            raise ValueError(f"invalid {role} token id {tid}")
        if tid < n_vocab and role not in ids:
            ids[role] = tid

    added = (tok_json or {}).get("added_tokens", [])
    if tok_cfg:
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
        raise ValueError(f"{hf_dir} has neither tokenizer.model nor tokenizer.json")
    model = tok_json.get("model") or {}
    if model.get("byte_fallback"):
        raise NotImplementedError(f"{hf_dir}: a SentencePiece-style tokenizer.json without tokenizer.model "
                                  "is not converted yet")
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
    return Vocab("gpt2", tokenizer_pre, tokens, types, _merges(tok_json), None, ids, add,
                 _chat_template(hf_dir, tok_cfg))


def read_spm_vocab(hf_dir: str, cfg: dict) -> Vocab:
    """The SentencePiece vocabulary of ``hf_dir`` (tokenizer.model), padded to config.json's
    vocab_size with "[PAD<id>]" (UNUSED, score -10000)."""
    pieces = read_pieces(os.path.join(hf_dir, "tokenizer.model"))
    n = int(cfg.get("vocab_size") or len(pieces))
    tokens = [f"[PAD{i}]" for i in range(n)]
    scores = [-10000.0] * n
    types = [UNUSED] * n
    for i, (text, score, kind) in enumerate(pieces[:n]):
        tokens[i], scores[i] = text, score
        types[i] = kind if kind in (UNKNOWN, CONTROL, UNUSED, BYTE) else NORMAL
    if len(pieces) > n:
        log.warning("tokenizer.model has %d pieces; ids from %d on are dropped (vocab_size)", len(pieces), n)
    extra = _read_json(os.path.join(hf_dir, "added_tokens.json")) or {}
    for text, i in extra.items():
        if 0 <= int(i) < n:
            tokens[int(i)], scores[int(i)], types[int(i)] = text, -1000.0, USER_DEFINED
    tok_cfg = _read_json(os.path.join(hf_dir, "tokenizer_config.json"))
    for i, t in ((tok_cfg or {}).get("added_tokens_decoder") or {}).items():
        i = int(i)
        if not 0 <= i < n:
            continue
        text = t["content"]
        if t.get("special") or looks_special(text):
            types[i] = CONTROL
        else:
            text = text.replace("\u2581", " ")
            types[i] = USER_DEFINED
        tokens[i], scores[i] = text, -1000.0
    tok_json = _read_json(os.path.join(hf_dir, "tokenizer.json"))
    ids, add = _special_ids_and_flags(hf_dir, tok_json, tok_cfg, cfg, n)
    return Vocab("llama", "default", tokens, types, [], scores, ids, add, _chat_template(hf_dir, tok_cfg))


def read_vocab(hf_dir: str, cfg: dict, tokenizer_pre: Optional[str] = None) -> Vocab:
    """tokenizer.model (SentencePiece) when the folder has one, else tokenizer.json (BPE)."""
    if os.path.isfile(os.path.join(hf_dir, "tokenizer.model")):
        return read_spm_vocab(hf_dir, cfg)
    return read_bpe_vocab(hf_dir, cfg, tokenizer_pre)


def write_vocab(w, v: Vocab) -> None:
    """Puts ``v`` on the gguf.GGUFWriter ``w`` in llama.cpp's key order."""
    w.add_tokenizer_model(v.model)
    if v.pre is not None:
        w.add_tokenizer_pre(v.pre)
    w.add_token_list(v.tokens)
    if v.scores is not None:
        w.add_token_scores(v.scores)
    w.add_token_types(v.types)
    if v.merges:
        w.add_token_merges(v.merges)
    for role, tid in v.special_ids.items():
        adder = getattr(w, f"add_{role}_token_id", None)  # gguf has no key for some roles (cls)
        if adder is not None:
            adder(tid)
    for role, flag in v.add_special.items():
        adder = getattr(w, f"add_add_{role}_token", None)
        if adder is not None:
            adder(flag)
    if v.chat_template is not None:
        w.add_chat_template(v.chat_template)
    if v.add_space_prefix is not None:
        w.add_add_space_prefix(v.add_space_prefix)
