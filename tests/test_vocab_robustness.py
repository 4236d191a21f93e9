"""Odd but well-formed vocabularies never crash the tokenizer: tiny token
lists (where a tokenizer model's default special ids — gpt2: 11, bert:
100..103 — lie outside the vocabulary), missing byte tokens, every tokenizer
model, every known and an unknown pre-tokenizer. Building, tokenizing and
detokenizing either work or raise a Python exception. (A 3-token gpt2
vocabulary once read past the token table through its default eos id.)
Malformed or corrupted T5 charsmaps raise ValueError. Small T5, RWKV and
PLaMo 2 vocabularies written here tokenize to the ids llama.cpp gives them."""
from __future__ import annotations

import pytest

from llamapy import _engine as E

TOKEN_LISTS = [["a"], ["a", "b", "ab"], ["<unk>", "<s>", "</s>", "a"], ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "##b"],
               ["<|endoftext|>", "<|im_end|>", "Ġ", "a"]]
PRES = E.pre_tokenizer_names() + ["", "no-such-pre"]
TEXTS = ["", "a", "ab ab", "zz\n\n", "é 日本 🎉", "<|im_end|> [CLS] <s>", "   ", "1234567", "<dna>acgt</dna>x<dna>a",
         b"\xff\xfe bad utf-8 \xe2\x96"]


@pytest.mark.parametrize("model", ["gpt2", "llama", "bert", "gemma4", "t5", "rwkv", "plamo2", "test", "whitespace",
                                   "hybriddna"])
@pytest.mark.parametrize("pre", PRES)
def test_tiny_vocabularies_do_not_crash(model, pre):
    for toks in TOKEN_LISTS + [["<dna>", "</dna>", "<oov>", "AAAAAA\ue000", "a"]]:
        try:
            v = E.Vocab(model=model, pre=pre, tokens=toks, merges=["a b"] if model in ("gpt2", "gemma4") else None)
        except (ValueError, NotImplementedError):
            continue
        for sid in (v.bos, v.eos, v.unk, v.sep, v.pad, v.mask, v.eot, v.eom, v.nl):
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


def write_vocab(path, arch, model, tokens, *, types=None, scores=None, merges=None, pre=None, extra=None) -> str:
    """A vocabulary-only GGUF: tokenizer model, tokens and the optional
    arrays; extra(writer) adds what a test needs beyond those."""
    import gguf

    wr = gguf.GGUFWriter(str(path), arch)
    wr.add_tokenizer_model(model)
    if pre is not None:
        wr.add_tokenizer_pre(pre)
    wr.add_token_list(tokens)
    if scores is not None:
        wr.add_token_scores(scores)
    if types is not None:
        wr.add_token_types(types)
    if merges is not None:
        wr.add_token_merges(merges)
    if extra is not None:
        extra(wr)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.close()
    return str(path)



def write_t5_vocab(path, charsmap: bytes) -> str:
    def extra(wr):
        wr.add_add_space_prefix(True)
        if charsmap is not None:
            wr.add_precompiled_charsmap(charsmap)

    return write_vocab(path, "t5", "t5", ["<pad>", "</s>", "<unk>", "\u2581a", "a", "\u2581", "b", "<mask>"],
                       scores=[0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, 0.0], types=[3, 3, 2, 1, 1, 1, 1, 4], extra=extra)


def test_t5_unigram_tiny_vocabulary(tmp_path):
    """(The ids are llama.cpp's for this file.)"""
    v = E.Vocab.from_file(write_t5_vocab(tmp_path / "t5.gguf", None))
    # " a" is one token (score -1 beats -3 + -2); unknown codepoints merge into one <unk>
    assert v.tokenize("a", False, False) == [3]
    assert v.tokenize("ab", True, False) == [3, 6, 1]  # EOS added, no BOS (the t5 defaults)
    assert v.tokenize("a\u00e9\u00e9b", False, False) == [3, 2, 6]
    # a user-defined token is cut out first; the text after it gets its own space prefix (as llama.cpp does)
    assert v.tokenize("a<mask>b", False, False) == [3, 7, 5, 6]
    assert v.detokenize([3, 6]) == b" ab"


@pytest.mark.parametrize("charsmap", [b"\x01", b"\xff\xff\xff\x7f" + b"\0" * 8, b"\x08\0\0\0" + b"\0" * 4,
                                      b"\x04\0\0\0\xff\xff\xff\xff" + b"ab", b"\x08\0\0\0" + bytes(range(8)) + b"xyz"])
def test_malformed_charsmap_raises(tmp_path, charsmap):
    """A charsmap too short, whose double array runs past its end, or whose
    walk leaves the array or the replacement strings: a ValueError, never a
    crash, at load or when tokenizing."""
    path = write_t5_vocab(tmp_path / "bad.gguf", charsmap)
    try:
        v = E.Vocab.from_file(path)
    except ValueError:
        return
    for text in ["a", "ab", "\u00e9", "\x00\x01 z", "<mask>"]:
        try:
            ids = v.tokenize(text, True, True)
        except ValueError:
            continue
        assert all(0 <= i < 8 for i in ids)


def test_corrupted_real_charsmap_never_crashes(tmp_path, llama_cpp_sdist):
    import random

    import gguf

    r = gguf.GGUFReader(str(llama_cpp_sdist / "vendor" / "llama.cpp" / "models" / "ggml-vocab-nomic-bert-moe.gguf"))
    field = r.fields["tokenizer.ggml.precompiled_charsmap"]
    real = bytes(field.parts[field.data[0]]) if len(field.data) == 1 else bytes(int(field.parts[i][0]) for i in field.data)
    assert len(real) > 1000
    rng = random.Random(5)
    for k in range(12):
        bad = bytearray(real)
        for _ in range(50):
            bad[rng.randrange(4, len(bad))] = rng.randrange(256)
        path = write_t5_vocab(tmp_path / f"c{k}.gguf", bytes(bad))
        try:
            v = E.Vocab.from_file(path)
        except ValueError:
            continue
        for text in ["Hello World", "\uff21\uff22 \u00bd \u2460 ﬁ", "é\u0301 x"]:
            try:
                v.tokenize(text, False, False)
            except ValueError:
                pass


def write_rwkv_vocab(path) -> str:
    # every byte as \xhh, then longer tokens in RWKV's escaped form
    toks = [f"\\x{b:02x}" for b in range(256)] + ["ab", "abc", "\\n\\n", "hello", " world", "\\t\\\\", "\\xe6\\x97\\xa5"]
    return write_vocab(path, "rwkv6", "rwkv", toks, types=[1] * len(toks))


def test_rwkv_greedy_longest_match(tmp_path):
    """(The ids are llama.cpp's for this file.)"""
    v = E.Vocab.from_file(write_rwkv_vocab(tmp_path / "rwkv.gguf"))
    assert v.tokenize("abcab hello world\n\n\t\\", True, True) == [257, 256, 32, 259, 260, 258, 261]
    assert v.tokenize("\u65e5x", False, False) == [262, 120]
    assert v.nl == 10 and (v.bos, v.eos, v.unk) == (-1, -1, -1)
    assert v.detokenize([262, 261, 257]) == "\u65e5\t\\abc".encode()


def write_plamo2_vocab(path, scores=None) -> str:
    toks = ["<|plamo:unk|>", "<|plamo:bos|>", "<|plamo:eos|>", "<|plamo:pad|>"] + [f"<0x{b:02X}>" for b in range(256)]
    toks += ["a", "b", "ab", "abc", "bc", " ", " a", "\u65e5\u672c", "\u65e5", "c"]
    return write_vocab(path, "plamo2", "plamo2", toks,
                       scores=scores or [0.0] * 260 + [-1.0, -1.0, -1.5, -4.0, -1.2, -0.5, -1.7, -2.0, -1.0, -1.0],
                       types=[3, 3, 3, 3] + [6] * 256 + [1] * 10)


def test_plamo2_best_split(tmp_path):
    """(The ids are llama.cpp's for this file.)"""
    v = E.Vocab.from_file(write_plamo2_vocab(tmp_path / "plamo2.gguf"))
    # the BOM dropped; "a"+"bc" beats "abc" (-2 < -4); z and é are unknown: their byte tokens
    assert v.tokenize("\ufeffabc a\u65e5\u672cz\u00e9", True, True) == [260, 264, 265, 260, 267, 126, 199, 173]
    assert v.tokenize("abcbcab  a b", False, False) == [260, 264, 264, 262, 265, 265, 260, 265, 261]
    assert v.tokenize("x\u65e5\u65e5\u672cc", False, False) == [124, 268, 267, 269]
    assert (v.bos, v.eos, v.unk, v.pad, v.nl) == (1, 2, 0, 3, 14)
    assert v.detokenize([262, 266, 199, 173]) == "ab a\u00e9".encode()


def test_llama_cpp_test_tokenizer(tmp_path):
    """llama.cpp's "test" tokenizer model: each 5 bytes hash to an id, pieces are hex ids
    (the ids are llama.cpp's for this file)."""
    v = E.Vocab.from_file(write_vocab(tmp_path / "test.gguf", "llama", "test", [f"t{i}" for i in range(1000)]))
    assert v.tokenize("hello world, 12", True, True) == [322, 114, 225]
    assert v.detokenize([255, 10]) == b"ffa" and v.nl == 10


def test_integer_scores_and_longer_arrays(tmp_path):
    """Scores stored as I32 are read (llama.cpp reads both), and score/type
    arrays longer than the token list are cut to it (ids are llama.cpp's)."""
    path = write_vocab(tmp_path / "int_scores.gguf", "llama", "llama",
                       ["<unk>", "<s>", "</s>", "\u2581a", "a", "b", "\u2581ab", "ab"],
                       types=[2, 3, 3, 1, 1, 1, 1, 1, 1, 1],
                       extra=lambda wr: wr.add_array("tokenizer.ggml.scores", [0, 0, 0, -1, -2, -3, -20, -1, 5, 5]))  # ints; two extra
    v = E.Vocab.from_file(path)
    assert v.token_score(6) == -20.0
    assert v.tokenize("ab", True, False) == [1, 6]  # "▁a" (-1, leftmost of the ties) then "▁ab"


def test_hybriddna_kmers(tmp_path):
    """<dna> spans become 6-mer tokens (their U+E000 marker dropped from the
    shown text), the rest byte-level BPE (ids are llama.cpp's for this file)."""
    toks = ["a", "b", "c", "A", "C", "G", "T", "\u0120", "<dna>", "</dna>", "<oov>", "ACGTAC\ue000", "AAAAAA\ue000",
            "CCCCCC", "ab", "CC", "CCC", "CCCCCC\ue000", "GTAAAA\ue000"]
    v = E.Vocab.from_file(write_vocab(tmp_path / "dna.gguf", "llama", "hybriddna", toks, pre="gpt-2",
                                      types=[1] * 8 + [3, 3, 3] + [1] * 8, merges=["a b", "C C", "CC C", "CCC CCC"]))
    assert v.tokenize("ab<dna>acgtacCCCCCCgt</dna>CCCCCCab", False, False) == [14, 8, 11, 17, 18, 9, 15, 15, 15, 14]
    assert v.tokenize("<dna>acgtn", False, False) == [8, 10]  # "ACGTNA" (padded) is no k-mer: <oov>
    assert v.tokenize("CCCCCC <dna>ccc", False, False) == [15, 15, 15, 7, 8, 10]
    # parsed as a special token first, <dna> leaves plain text behind it
    assert v.tokenize("CCCCCC <dna>ccc", False, True) == [15, 15, 15, 7, 8, 2, 2, 2]
    assert v.token_text(11) == b"ACGTAC" and v.text_to_token("ACGTAC\ue000") == 11
