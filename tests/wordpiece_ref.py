"""A reference WordPiece tokenizer written from the BERT / Hugging Face
tokenizers specification, in plain Python (unicodedata only), to hold the
engine's WordPiece against on any text:

  BertNormalizer  drop NUL, U+FFFD and control characters (Cc Cf Co Cs);
                  whitespace -> ' '; spaces around CJK ideographs; with
                  accent stripping NFD then drop Mn; with lowercasing each
                  character's lowercase (no context rules);
  BertPreTokenizer  split at whitespace, each punctuation character (ASCII
                  punctuation or symbol, Unicode P*) a word of its own;
  WordPiece       greedy longest match, "##" on continuations, a word over
                  100 characters or with an unmatched piece is [UNK].

The vocabulary is given in GGUF layout (see encoder_ref.py) and turned back
into the HF one: "\u2581x" -> "x", bare "x" -> "##x", specials as they are.
"""
from __future__ import annotations

import unicodedata
from typing import Dict, List, Sequence

WHITESPACE = set(range(0x09, 0x0E)) | {0x20, 0x85, 0xA0, 0x1680} | set(range(0x2000, 0x200B)) \
    | {0x2028, 0x2029, 0x202F, 0x205F, 0x3000}
CJK = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
       (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]


def _is_control(ch: str) -> bool:
    return ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs")


def _is_punct(ch: str) -> bool:
    cp = ord(ch)
    if 0x21 <= cp <= 0x2F or 0x3A <= cp <= 0x40 or 0x5B <= cp <= 0x60 or 0x7B <= cp <= 0x7E:
        return True
    return unicodedata.category(ch).startswith("P")


def normalize(text: str, lowercase: bool = True, strip_accents: bool | None = None) -> str:
    out: List[str] = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or _is_control(ch):
            continue
        if ch in "\t\n\r" or cp in WHITESPACE:
            out.append(" ")
        elif any(lo <= cp <= hi for lo, hi in CJK):
            out += [" ", ch, " "]
        else:
            out.append(ch)
    s = "".join(out)
    if strip_accents if strip_accents is not None else lowercase:
        s = "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")
    if lowercase:
        s = "".join(c.lower() for c in s)
    return s


def words(text: str) -> List[str]:
    out: List[str] = []
    cur: List[str] = []
    for ch in text:
        if ch == " " or ord(ch) in WHITESPACE:
            if cur:
                out.append("".join(cur))
            cur = []
        elif _is_punct(ch):
            if cur:
                out.append("".join(cur))
            out.append(ch)
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def hf_vocab(gguf_tokens: Sequence[str], token_types: Sequence[int]) -> Dict[str, int]:
    vocab: Dict[str, int] = {}
    for i, (t, ty) in enumerate(zip(gguf_tokens, token_types)):
        if ty != 1:
            continue  # specials never match a piece
        key = t[1:] if t.startswith("\u2581") else "##" + t
        vocab.setdefault(key, i)
    return vocab


def wordpiece(word: str, vocab: Dict[str, int], unk: int) -> List[int]:
    if len(word) > 100:
        return [unk]
    out: List[int] = []
    start = 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                out.append(vocab[piece])
                break
            end -= 1
        if end == start:
            return [unk]
        start = end
    return out


def tokenize(text: str, vocab: Dict[str, int], cls: int, sep: int, unk: int, lowercase: bool = True,
             strip_accents: bool | None = None) -> List[int]:
    ids = [cls]
    for w in words(normalize(text, lowercase, strip_accents)):
        ids += wordpiece(w, vocab, unk)
    return ids + [sep]
