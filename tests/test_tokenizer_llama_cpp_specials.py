"""Special tokens as llama.cpp treats them, on every tokenizer test vocabulary
of the llama-cpp-python 0.3.36 sdist and on Gemma 3 270M.

tests/data/llama_cpp_vocab_specials.json was recorded with
tools/record_vocab_fixtures.py from llama-cpp-python 0.3.36: for a spread of
each vocabulary's control, user-defined, unknown, unused, byte and undefined
tokens, its special-looking normal tokens, its EOG tokens and a fixed list of
special-looking strings (`</s>`, `<|im_end|>`, `<unused0>`, `[MASK]`, ...,
present in the vocabulary or not), `Llama.tokenize` of each text alone, inside
words, between spaces and newlines, doubled and cut short, with
add_bos/special on and off; `Llama.detokenize` of those ids alone, after BOS,
in pairs, of the longest tokens and the byte tokens, with special on and off;
and llama.cpp's resulting token attributes, EOG list, special ids (BOS, EOS,
EOT, SEP, newline, pad, FIM) and add_bos/eos/sep. Here llamapy's
`Llama(path, vocab_only=True)` must give the same for every case.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from llamapy import Llama

DATA = Path(__file__).parent / "data"
ATTR_CONTROL, ATTR_USER_DEFINED, ATTR_UNUSED = 8, 16, 2


@functools.lru_cache(maxsize=None)
def fixture() -> dict:
    return json.loads((DATA / "llama_cpp_vocab_specials.json").read_text(encoding="utf-8"))


VOCABS = [v["vocab"] for v in fixture()["vocabs"]]


@functools.lru_cache(maxsize=None)
def load(path: str) -> Llama:
    return Llama(path, vocab_only=True, verbose=False)


@pytest.fixture
def case(request, llama_cpp_sdist, gemma_path):
    vd = next(v for v in fixture()["vocabs"] if v["vocab"] == request.param)
    path = gemma_path if vd["vocab"] == "gemma-3-270m" else str(llama_cpp_sdist / "vendor" / "llama.cpp" / "models" / vd["vocab"])
    return vd, load(path)


def test_fixture_covers_the_classes():
    vocabs = fixture()["vocabs"]
    assert len(vocabs) == 20 and fixture()["llama_cpp_python"] == "0.3.36"
    attrs = [a for v in vocabs for _, a in v["attrs"]]
    # control, user-defined, unused and control+user-defined ("</s>" made EOG) tokens are all probed
    for bits in (ATTR_CONTROL, ATTR_USER_DEFINED, ATTR_CONTROL | ATTR_UNUSED, ATTR_CONTROL | ATTR_USER_DEFINED):
        assert bits in attrs
    assert sum(len(v["tokenize"]) for v in vocabs) > 10000


@pytest.mark.parametrize("case", VOCABS, indirect=True)
def test_token_attributes_and_eog(case):
    vd, llm = case
    vocab = llm.tokenizer_.native
    assert llm.n_vocab() == vd["n_vocab"]
    assert [[i, vocab.token_attr(i)] for i, _ in vd["attrs"]] == vd["attrs"]
    assert llm.tokenizer_.eog_ids == vd["eog"]


@pytest.mark.parametrize("case", VOCABS, indirect=True)
def test_special_ids_and_flags(case):
    vd, llm = case
    vocab = llm.tokenizer_.native
    assert {k: getattr(vocab, k) for k in vd["special_ids"]} == vd["special_ids"]
    assert {k: bool(getattr(vocab, k)) for k in vd["flags"]} == vd["flags"]
    assert (llm.token_bos(), llm.token_eos(), llm.token_nl()) == tuple(vd["special_ids"][k] for k in ("bos", "eos", "nl"))


@pytest.mark.parametrize("case", VOCABS, indirect=True)
def test_tokenize_special_and_not(case):
    vd, llm = case
    wrong = []
    for text, *want in vd["tokenize"]:
        got = [llm.tokenize(text.encode("utf-8"), add_bos=ab, special=sp) for ab in (False, True) for sp in (False, True)]
        if got != want:
            wrong.append((text, want, got))
    assert not wrong, f"{len(wrong)}/{len(vd['tokenize'])} texts differ, first: {wrong[0]!r}"


def as_llama_cpp_python(llm: Llama, ids, special: bool) -> bytes:
    """What llama-cpp-python 0.3.36's detokenize gives: its 32-byte piece
    buffer loses every piece longer than that (a difference llamapy keeps on
    purpose: it never loses text), then one leading space after BOS goes."""
    vocab = llm.tokenizer_.native
    out = b"".join(p for p in (vocab.token_to_piece(i, special) for i in ids) if len(p) <= 32)
    return out[1:] if ids and ids[0] == llm.token_bos() and out[:1] == b" " else out


@pytest.mark.parametrize("case", VOCABS, indirect=True)
def test_detokenize_special_and_not(case):
    vd, llm = case
    vocab = llm.tokenizer_.native
    wrong = []
    for ids, plain, special in vd["detokenize"]:
        got = [as_llama_cpp_python(llm, ids, sp).hex() for sp in (False, True)]
        if got != [plain, special]:
            wrong.append((ids, plain, special, got))
        for sp in (False, True):
            pieces = [vocab.token_to_piece(i, sp) for i in ids]
            whole = b"".join(pieces)
            # llamapy keeps every piece, and drops only the space after BOS
            want = whole[1:] if ids and ids[0] == llm.token_bos() and whole[:1] == b" " else whole
            assert llm.detokenize(ids, special=sp) == want
    assert not wrong, f"{len(wrong)}/{len(vd['detokenize'])} id lists differ, first: {wrong[0]!r}"


def test_pieces_longer_than_32_bytes_are_kept(gemma_path):
    # Gemma 3 has 379 such tokens (whole Bengali and Hindi words among them);
    # llama-cpp-python's 32-byte buffer would drop "পাকিস্তানের" from its text.
    llm = load(gemma_path)
    text = "পাকিস্তানের রাজধানী"
    ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    pieces = [llm.tokenizer_.native.token_to_piece(i, False) for i in ids]
    assert any(len(p) > 32 for p in pieces)
    assert llm.detokenize(ids).decode("utf-8").strip() == text
    assert as_llama_cpp_python(llm, ids, False) != llm.detokenize(ids)
