"""Fill-in-the-middle prompts: the code a model writes between a prefix and
a suffix, from the model's own FIM tokens.

Two users: ``create_completion(prompt, suffix=...)`` (the prompt is the
prefix) and the server's ``/infill`` (llama-server's request: a prefix, a
suffix, the start of the middle, and other files of the repository). Both
lay the prompt out the same way:

    [FIM_REP] myproject\\n                    (repository-level models only)
    [FIM_SEP] filename\\n  text of the file    (one per extra file)
    [FIM_SEP] filename\\n                      (the file being edited)
    [BOS] [FIM_PRE] prefix middle-start [FIM_SUF] suffix [FIM_MID]

or with the suffix first (``spm_infill``: [FIM_SUF] suffix [FIM_PRE]
prefix middle-start [FIM_MID]), as some models were trained. Without
FIM_SEP the extra files are joined by a plain-text separator, as
llama-server does. Nothing is cut: a prompt that does not fit the context is
the caller's clear error, never a silently shortened prefix.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

# Between extra files when the vocabulary has no file separator token.
_CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"
_REPO_NAME = "myproject\n"
_CURRENT_FILE = "filename\n"


@dataclass(frozen=True)
class FimTokens:
    """The vocabulary's fill-in-the-middle token ids (-1: none)."""

    pre: int
    suf: int
    mid: int
    rep: int = -1
    sep: int = -1

    @property
    def usable(self) -> bool:
        return self.pre >= 0 and self.suf >= 0 and self.mid >= 0

    def missing(self) -> List[str]:
        """The names of the tokens a FIM prompt needs and the model lacks."""
        return [name for name, t in (("prefix", self.pre), ("suffix", self.suf), ("middle", self.mid)) if t < 0]


def fim_tokens(tokenizer: Any) -> FimTokens:
    """The FIM tokens of a LlamaTokenizer (llamapy/_tokenizer.py); none for a
    tokenizer that names no special tokens."""
    get = getattr(tokenizer, "special_token", lambda name: -1)
    return FimTokens(pre=get("fim_pre"), suf=get("fim_suf"), mid=get("fim_mid"), rep=get("fim_rep"),
                     sep=get("fim_sep"))


def tokenize_inner(tokenizer: Any, text: str) -> List[int]:
    """``text`` tokenized as it reads in the middle of a file: plain text (no
    special tokens, no BOS) and without the leading space a SentencePiece
    vocabulary adds to the start of an input. The text is tokenized after a
    marker character whose own tokens are then dropped; where the marker
    merges with the text (the two do not split where expected) the plain
    tokenization is taken instead."""
    if not text:
        return []
    marker = "\u263a"
    head = tokenizer.tokenize(marker.encode("utf-8"), add_bos=False, special=False)
    both = tokenizer.tokenize((marker + text).encode("utf-8"), add_bos=False, special=False)
    if head and both[:len(head)] == head:
        return both[len(head):]
    return tokenizer.tokenize(text.encode("utf-8"), add_bos=False, special=False)


def extra_tokens(tokenizer: Any, fim: FimTokens, extra: Sequence[Dict[str, str]]) -> List[int]:
    """The repository context before the FIM prefix: the other files, then
    the current file's header (only with a file separator token)."""
    out: List[int] = []
    plain = lambda s: tokenizer.tokenize(s.encode("utf-8"), add_bos=False, special=False)  # noqa: E731
    if fim.rep >= 0:
        out += [fim.rep] + plain(_REPO_NAME)
    for chunk in extra:
        if fim.sep >= 0:
            out += [fim.sep] + plain(chunk.get("filename", "tmp") + "\n")
        else:
            out += plain(_CHUNK_SEPARATOR)
        out += plain(chunk["text"])
    if fim.sep >= 0:
        out += [fim.sep] + plain(_CURRENT_FILE)
    return out


def infill_prompt(tokenizer: Any, fim: FimTokens, prefix: List[int], suffix: List[int],
                  middle_start: Sequence[int] = (), extra: Optional[List[int]] = None,
                  spm: bool = False, bos: bool = True) -> List[int]:
    """The token layout of the module docstring from already tokenized parts."""
    if not fim.usable:
        raise ValueError("this model has no fill-in-the-middle tokens (missing: "
                         + ", ".join(fim.missing()) + ")")
    pre = [fim.pre] + list(prefix) + list(middle_start)
    suf = [fim.suf] + list(suffix)
    body = (suf + pre) if spm else (pre + suf)
    head = list(extra or [])
    b = tokenizer.token_bos()
    if bos and tokenizer.add_bos and b >= 0:
        head.append(b)
    return head + body + [fim.mid]
