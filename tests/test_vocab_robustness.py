"""Odd but well-formed vocabularies never crash the tokenizer: tiny token
lists (where a tokenizer model's default special ids — gpt2: 11, bert:
100..103 — lie outside the vocabulary), missing byte tokens, every known and
an unknown pre-tokenizer. Building, tokenizing and detokenizing either work or
raise a Python exception. (A 3-token gpt2 vocabulary once read past the token
table through its default eos id.)"""
from __future__ import annotations

import pytest

from llamapy import _engine as E

TOKEN_LISTS = [["a"], ["a", "b", "ab"], ["<unk>", "<s>", "</s>", "a"], ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "##b"],
               ["<|endoftext|>", "<|im_end|>", "Ġ", "a"]]
PRES = ["default", "gpt2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "falcon", "starcoder", "gpt-4o",
        "tekken", "smollm", "", "no-such-pre"]
TEXTS = ["", "a", "ab ab", "zz\n\n", "é 日本 🎉", "<|im_end|> [CLS] <s>", "   ", "1234567"]


@pytest.mark.parametrize("model", ["gpt2", "llama", "bert"])
@pytest.mark.parametrize("pre", PRES)
def test_tiny_vocabularies_do_not_crash(model, pre):
    for toks in TOKEN_LISTS:
        try:
            v = E.Vocab(model=model, pre=pre, tokens=toks, merges=["a b"] if model == "gpt2" else None)
        except (ValueError, NotImplementedError):
            continue
        for sid in (v.bos, v.eos, v.unk, v.sep, v.pad, v.mask, v.eot, v.eom):
            assert sid == -1 or 0 <= sid < len(toks)
        for text in TEXTS:
            for add, special in ((True, True), (False, False)):
                try:
                    ids = v.tokenize(text, add, special)
                except ValueError:
                    continue
                assert all(0 <= i < len(toks) for i in ids)
                v.detokenize(ids)
                for i in ids:
                    v.token_to_piece(i)


def test_out_of_range_default_ids_are_reported():
    v = E.Vocab(model="gpt2", pre="gpt2", tokens=["a", "b", "ab"], merges=["a b"])
    assert v.eos == -1 and v.bos == -1
    assert any("outside the vocabulary" in w for w in v.warnings)
