"""WordPiece (tokenizer.ggml.model "bert"): the engine's tokenizer against
the Hugging Face tokenizer's own ids for all-MiniLM-L6-v2 (recorded in
tests/data/minilm_reference.npz) and against the Python reference
(tests/wordpiece_ref.py) on random text, for the real vocabulary and a tiny
one; cased vocabularies; special-token handling as llama.cpp does it."""
from __future__ import annotations

import random

import pytest

import encoder_ref as ER
import minilm_ref as M
import wordpiece_ref as W
from llamapy import _engine as E

PIECES = ["the", "cat", "Cat", "unbelievable", "play", "playing", "café", "Café", "naïve", "x" * 120, "hello",
          ",", "!", "...", "'s", "北京", "日本", "😀", "\u00a0", "\t", "\n", "  ", "İ", "ß", "Σ", "\u0301", "\u200b",
          "\x00", "\ufffd", "\u2028", "Ǆ", "ﬁ"]


def fuzz(n, seed):
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) + (" " if rng.random() < 0.6 else "") for _ in range(rng.randint(0, 10)))
            for _ in range(n)]


def vocab_of(path):
    v = E.Vocab.from_file(str(path))
    return v


@pytest.fixture(scope="module")
def tiny_vocab(tmp_path_factory):
    root = tmp_path_factory.mktemp("wpm")
    path, cfg, _ = ER.make_model(root, "bert", "F32", 1)
    tokens, types = ER.vocab_tokens()
    return E.Vocab.from_file(str(path)), W.hf_vocab(tokens, types)


def test_tiny_vocab_matches_reference(tiny_vocab):
    v, hf = tiny_vocab
    for text in fuzz(500, 1) + ["The cat sat, unbelievable!", "", "   ", "zzz", "playing played plays"]:
        assert list(v.tokenize(text.encode(), True, False)) == W.tokenize(text, hf, 2, 3, 1), text
    assert list(v.tokenize(b"the cat", False, False)) == [5, 6]  # no [CLS]/[SEP] without add_special


def test_tiny_vocab_specials_and_pieces(tiny_vocab):
    v, _ = tiny_vocab
    # Special-token texts are plain text unless parse_special, as in llama.cpp.
    assert list(v.tokenize(b"[SEP]", False, True)) == [3]
    assert list(v.tokenize(b"[SEP]", False, False)) != [3]
    assert v.token_to_piece(5, False) == b" the"  # word-initial pieces render with a space
    assert v.token_to_piece(38, False) == b"believ"
    assert v.token_to_piece(2, False) == b"" and v.token_to_piece(2, True) == b"[CLS]"


def test_minilm_ids_equal_hf_tokenizer():
    ref = M.reference()
    v = E.Vocab.from_file(M.gguf_path("f16"))
    for text, ids in zip(ref["sentences"] + ref["fuzz_texts"], ref["ids_list"] + ref["fuzz_ids_list"]):
        assert list(v.tokenize(text.encode(), True, False)) == ids, text


def test_minilm_matches_python_reference_on_random_text():
    import gguf

    path = M.gguf_path("f16")
    r = gguf.GGUFReader(path)
    f = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode() for i in f.data]
    types = [int(r.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in r.fields["tokenizer.ggml.token_type"].data]
    hf = W.hf_vocab(tokens, types)
    v = E.Vocab.from_file(path)
    for text in fuzz(400, 2):
        assert list(v.tokenize(text.encode(), True, False)) == W.tokenize(text, hf, 101, 102, 100), text


def test_cased_vocabulary(tmp_path):
    import gguf
    tokens, types = ER.vocab_tokens()
    tokens = tokens + ["\u2581Cat", "\u2581Café"]
    types = types + [1, 1]
    p = tmp_path / "cased.gguf"
    w = gguf.GGUFWriter(str(p), "bert")
    w.add_tokenizer_model("bert")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_uint32("tokenizer.ggml.bos_token_id", 2)
    w.add_uint32("tokenizer.ggml.seperator_token_id", 3)
    w.add_uint32("tokenizer.ggml.unknown_token_id", 1)
    w.add_bool("tokenizer.wordpiece.lowercase", False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    v = E.Vocab.from_file(str(p))
    hf = W.hf_vocab(tokens, types)
    for text in ["Cat cat Café café CAT", "The Cat"] + fuzz(200, 3):
        assert list(v.tokenize(text.encode(), True, False)) == W.tokenize(text, hf, 2, 3, 1, lowercase=False), text
    assert list(v.tokenize("Café".encode(), False, False)) == [len(tokens) - 1]
