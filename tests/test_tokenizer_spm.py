"""SentencePiece-style (SPM) tokenization, vendor/engine/vocab/, on Gemma 3
270M's 262k vocabulary, held to llama.cpp:

- the fixture's reference ids (llama.cpp through llama-cpp-python, both
  add_bos=True/special=False and add_bos=False/special=True) match exactly;
- a vocabulary built from GGUFFile metadata lists equals the natively read one;
- pieces, byte fallback for characters outside the vocabulary, exact
  round trips of any bytes (invalid UTF-8 included), special-token rules,
  the space prefix and llama_detokenize's leading-space removal.
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from llamapy import GGUFFile, _engine

pytestmark = pytest.mark.model

FIXTURE_NAME = "gemma-3-270m-q4_k_m.llama_cpp.json"
# shared/ lies beside the checkout (here and in CI)
FIXTURE_DIRS = [Path(__file__).resolve().parent / "data", Path(__file__).resolve().parents[2] / "shared" / "fixtures", Path("/work/shared/fixtures")]

BOS, EOS, UNK, PAD = 2, 1, 3, 0
START_OF_TURN, END_OF_TURN = 105, 106
BYTE_0x00 = 238  # <0x00> .. <0xFF> are ids 238..493


def _fixture() -> dict:
    for d in FIXTURE_DIRS:
        p = d / FIXTURE_NAME
        if p.exists():
            return json.loads(p.read_text(encoding="utf-8"))
    raise FileNotFoundError(f"{FIXTURE_NAME}: the copy in tests/data is part of the repository")


@pytest.fixture(scope="module")
def vocab(gemma_path):
    return _engine.Vocab.from_file(gemma_path)


def _vocab_from_metadata(path: str, **overrides):
    md = GGUFFile(path).metadata
    args = dict(
        model=md["tokenizer.ggml.model"],
        pre=md.get("tokenizer.ggml.pre", ""),
        tokens=list(md["tokenizer.ggml.tokens"]),
        scores=md["tokenizer.ggml.scores"].numpy(),
        token_types=md["tokenizer.ggml.token_type"].numpy(),
        bos_id=md["tokenizer.ggml.bos_token_id"],
        eos_id=md["tokenizer.ggml.eos_token_id"],
        unk_id=md["tokenizer.ggml.unknown_token_id"],
        pad_id=md["tokenizer.ggml.padding_token_id"],
        add_bos=md.get("tokenizer.ggml.add_bos_token"),
        add_eos=md.get("tokenizer.ggml.add_eos_token"),
        add_space_prefix=md.get("tokenizer.ggml.add_space_prefix"),
    )
    args.update(overrides)
    return _engine.Vocab(**args)


def test_reference_ids_match_llama_cpp(vocab):
    cases = _fixture()["tokenize"]
    assert len(cases) == 70
    for case in cases:
        got = vocab.tokenize(case["text"], case["add_bos"], case["special"])
        assert got == case["ids"], (case["text"], case["add_bos"], case["special"])
        # bytes in, same ids out
        assert vocab.tokenize(case["text"].encode(), case["add_bos"], case["special"]) == case["ids"]


def test_metadata_and_special_ids(vocab):
    assert vocab.n_vocab == 262144 and vocab.model == "llama"
    assert (vocab.bos, vocab.eos, vocab.unk, vocab.pad) == (BOS, EOS, UNK, PAD)
    assert vocab.eot == END_OF_TURN  # found by its text, as llama.cpp does
    # "</s>" (212, user-defined) is an end of generation by its text, as llama.cpp has it
    assert vocab.eog_ids == [EOS, END_OF_TURN, 212] and vocab.token_text(212) == b"</s>"
    assert vocab.is_eog(END_OF_TURN) and not vocab.is_eog(START_OF_TURN)
    assert vocab.add_bos and not vocab.add_eos and not vocab.add_space_prefix
    assert vocab.nl == BYTE_0x00 + 0x0A  # SPM: the <0x0A> byte token
    assert vocab.warnings == ["control-looking token 212 '</s>' was not control-type; overriding"]


def test_vocab_from_metadata_lists_equals_native(gemma_path):
    path = gemma_path
    native = _engine.Vocab.from_file(path)
    md = GGUFFile(path).metadata
    tokens = list(md["tokenizer.ggml.tokens"])
    scores = md["tokenizer.ggml.scores"].numpy()
    types = md["tokenizer.ggml.token_type"].numpy()
    t0 = time.perf_counter()
    _engine.Vocab("llama", "default", tokens, scores, types, bos_id=2, eos_id=1, unk_id=3, add_space_prefix=False)
    elapsed = time.perf_counter() - t0
    assert elapsed < 1.0, f"building a 262k vocabulary took {elapsed:.3f} s"  # ~0.1 s measured
    built = _vocab_from_metadata(path)
    for case in _fixture()["tokenize"]:
        assert built.tokenize(case["text"], case["add_bos"], case["special"]) == case["ids"]
    rng = random.Random(5)
    for _ in range(200):
        s = "".join(chr(rng.choice([rng.randint(32, 126), rng.randint(0x400, 0x4FF), rng.randint(0x4E00, 0x9FFF),
                                    rng.randint(0x1F600, 0x1F64F), 10, 32, 32])) for _ in range(rng.randint(0, 30)))
        assert built.tokenize(s, True, True) == native.tokenize(s, True, True)


def test_pieces(vocab):
    hello = vocab.tokenize("Hello there", False, False)
    assert [vocab.token_to_piece(i) for i in hello] == [b"Hello", b" there"]
    assert vocab.token_text(hello[1]) == "\u2581there".encode()
    # control tokens render only with special=True
    assert vocab.token_to_piece(BOS) == b"" and vocab.token_to_piece(BOS, True) == b"<bos>"
    assert vocab.token_to_piece(END_OF_TURN, True) == b"<end_of_turn>"
    # user-defined tokens always render, byte tokens are their byte
    assert vocab.token_to_piece(108) == b"\n\n"
    assert vocab.token_to_piece(BYTE_0x00 + 0xE4) == b"\xe4"
    with pytest.raises(ValueError):
        vocab.token_to_piece(262144)


def test_character_outside_vocab_falls_back_to_bytes(vocab):
    # A rare CJK Extension B character: no token, so its UTF-8 bytes come out as <0xXX> tokens.
    ch = "\U0002A6D6"
    ids = vocab.tokenize(ch, False, False)
    assert ids == [BYTE_0x00 + b for b in ch.encode()]
    # Split across tokens, the character is whole again once the pieces are joined.
    pieces = [vocab.token_to_piece(i) for i in ids]
    assert all(len(p) == 1 for p in pieces) and b"".join(pieces).decode() == ch


def test_any_bytes_round_trip(vocab):
    """Valid UTF-8 comes back exactly. Invalid bytes never fail; as in
    llama.cpp, spaces become U+2581 before characters are split by their
    lead bytes, so a space swallowed by a broken sequence comes back as the
    bytes of U+2581."""
    rng = random.Random(1234)
    marker = "\u2581".encode()
    for _ in range(300):
        text = "".join(chr(rng.choice([rng.randint(0, 0xD7FF), rng.randint(0xE000, 0x2FFFF), 32]))
                       for _ in range(rng.randint(1, 20)))
        ids = vocab.tokenize(text, True, False)
        assert ids[0] == BOS and vocab.detokenize(ids[1:]) == text.encode()
        assert vocab.llama_detokenize(ids, remove_special=True) == text.encode()
    samples = [b"", b"\xff", b"\xc3", b"\xe2\x82", b"abc\x80def", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
               b"\xf7\xbf\xbf\xbf", b"\x00 \x01", b"\xe5u \xa0"]
    samples += [bytes(rng.randrange(256) for _ in range(rng.randint(1, 40))) for _ in range(300)]
    for raw in samples:
        ids = vocab.tokenize(raw, True, False)
        assert ids[:1] == [BOS] and all(0 <= i < vocab.n_vocab for i in ids)
        out = vocab.detokenize(ids[1:])
        assert out.replace(marker, b" ") == raw.replace(marker, b" ")
        assert vocab.llama_detokenize(ids, remove_special=True) == out


def test_special_tokens_in_text(vocab):
    text = "<start_of_turn>user\nhi<end_of_turn>"
    assert vocab.tokenize(text, False, True) == [START_OF_TURN, 2364, 107, 2202, END_OF_TURN]
    plain = vocab.tokenize(text, False, False)
    assert START_OF_TURN not in plain and END_OF_TURN not in plain
    assert vocab.detokenize(plain) == text.encode()
    # rendering controls back: only with special
    ids = vocab.tokenize(text, True, True)
    assert vocab.detokenize(ids) == b"user\nhi"
    assert vocab.detokenize(ids, special=True) == b"<bos>" + text.encode()
    # user-defined tokens (whitespace runs, newlines) are cut out even without parse_special
    assert vocab.tokenize("a  b", False, False) == vocab.tokenize("a", False, False) + [138] + vocab.tokenize("b", False, False)


def test_space_prefix_rules(gemma_path):
    """With add_space_prefix (the SPM default, off in Gemma 3's metadata): a
    space goes before the text and after every special token, and
    llama_detokenize drops it again at the start."""
    path = gemma_path
    v = _vocab_from_metadata(path, add_space_prefix=None)
    assert v.add_space_prefix
    plain = _engine.Vocab.from_file(path)
    assert v.tokenize("Hi", False, False) == plain.tokenize(" Hi", False, False)
    ids = v.tokenize("<start_of_turn>user", False, True)
    assert ids == [START_OF_TURN] + plain.tokenize(" user", False, False)
    assert v.tokenize("", True, False) == [BOS]
    hi = v.tokenize("Hi", True, False)
    assert v.llama_detokenize(hi[1:]) == b"Hi"  # the first piece loses its leading space
    # A leading BOS takes that removal: it renders empty (or is removed) and the space stays.
    assert v.llama_detokenize(hi) == b" Hi"
    assert v.llama_detokenize(hi, remove_special=True) == b" Hi"
    assert v.detokenize(hi) == b"Hi"  # llama-cpp-python drops one space after a leading BOS


def test_long_text_is_fast_and_consistent(vocab):
    words = ["token", "llama", "Gemma", "\u4e16\u754c", "caf\u00e9", "\U0001F600", "12345", "\n", "  ", "end."]
    rng = random.Random(7)
    text = " ".join(rng.choice(words) for _ in range(100_000))
    t0 = time.perf_counter()
    ids = vocab.tokenize(text, False, False)
    elapsed = time.perf_counter() - t0
    assert vocab.detokenize(ids) == text.encode()
    assert elapsed < 5.0, f"{len(ids)} tokens took {elapsed:.2f} s"
