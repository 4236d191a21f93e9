"""The tokenizer test vocabularies of llama.cpp (the ones the llama-cpp-python
0.3.36 sdist vendors, in vendor/llama.cpp/models/), held to llama.cpp itself.

- Each vocabulary with `.inp`/`.out` files: every case tokenizes to the ids
  llama.cpp's tests/test-tokenizer-0 expects (add_special and parse_special
  off, as that test runs them).
- Every vocabulary file loads, through `Llama(path, vocab_only=True)` too,
  whatever its architecture (gemma4, qwen2, command-r, starcoder2, ...).
- Every `tokenizer.ggml.pre` value llama.cpp accepts (read from its
  src/llama-vocab.cpp, so a name it gains is a failure here until llamapy
  knows it) is known to llamapy, and with that value set on the GPT-2
  vocabulary (the Gemma 4 one for Gemma-4-style names) tokenizes a corpus,
  adds BOS, and cleans up spaces in llama_detokenize exactly as llama.cpp
  did: tests/data/llama_cpp_pretokenizers.json, recorded with
  tools/record_vocab_fixtures.py --pre from llama-cpp-python 0.3.36. The
  BPE-based tokenizer models "whitespace" and "hybriddna", and the T5
  unigram vocabulary (nomic-bert-moe) on the same corpus, likewise.
"""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from llamapy import Llama, _engine

DATA = Path(__file__).parent / "data"

# The vocabularies with llama.cpp test cases, and those without.
WITH_CASES = ["bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2", "llama-bpe",
              "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact", "starcoder"]
WITHOUT_CASES = ["aquila", "baichuan", "gpt-neox", "nomic-bert-moe"]


def models_dir(sdist) -> Path:
    return sdist / "vendor" / "llama.cpp" / "models"


@functools.lru_cache(maxsize=None)
def vocab_at(path: str, overrides: tuple = ()) -> object:
    return _engine.Vocab.from_file(path, kv_overrides=dict(overrides) or None)


def read_cases(path: Path) -> list:
    """(text, ids) pairs as test-tokenizer-0 reads them."""
    inputs = Path(str(path) + ".inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    if inputs and inputs[-1] == "":
        inputs.pop()  # the file ends with a separator
    outputs = Path(str(path) + ".out").read_text(encoding="utf-8").splitlines()
    assert len(inputs) == len(outputs), path
    return [(t, [int(x) for x in o.split()]) for t, o in zip(inputs, outputs)]


@pytest.mark.parametrize("name", WITH_CASES)
def test_llama_cpp_tokenizer_cases(llama_cpp_sdist, name):
    path = models_dir(llama_cpp_sdist) / f"ggml-vocab-{name}.gguf"
    assert path.exists(), path
    cases = read_cases(path)
    assert len(cases) >= 40
    v = vocab_at(str(path))
    wrong = [(t, want, got) for t, want in cases if (got := list(v.tokenize(t.encode("utf-8"), False, False))) != want]
    assert not wrong, f"{len(wrong)}/{len(cases)} cases differ, first: {wrong[0]!r}"


@pytest.mark.parametrize("name", WITH_CASES + WITHOUT_CASES)
def test_vocab_only_loads_any_architecture(llama_cpp_sdist, name):
    path = models_dir(llama_cpp_sdist) / f"ggml-vocab-{name}.gguf"
    llm = Llama(str(path), vocab_only=True, verbose=False)
    v = vocab_at(str(path))
    assert llm.n_vocab() == v.n_vocab > 1000
    ids = llm.tokenize(b"Hello world", add_bos=False)
    assert ids == list(v.tokenize(b"Hello world", False, False)) and ids
    assert llm.detokenize(ids).strip().lower() == b"hello world"  # SPM: with its space prefix
    with pytest.raises(ValueError, match="vocab_only"):
        llm.eval(ids)


def test_sdist_vocabulary_list_is_complete(llama_cpp_sdist):
    """Every vocabulary file of the sdist is covered by the tests above."""
    names = sorted(p.name[len("ggml-vocab-"):-len(".gguf")] for p in models_dir(llama_cpp_sdist).glob("ggml-vocab-*.gguf"))
    assert sorted(WITH_CASES + WITHOUT_CASES) == names


def llama_cpp_pre_names(sdist) -> list:
    src = (sdist / "vendor" / "llama.cpp" / "src" / "llama-vocab.cpp").read_text(encoding="utf-8")
    return list(dict.fromkeys(re.findall(r'tokenizer_pre == "([^"]+)"', src)))


def test_every_llama_cpp_pre_tokenizer_is_known(llama_cpp_sdist):
    names = llama_cpp_pre_names(llama_cpp_sdist)
    assert len(names) > 80 and "qwen35" in names and "gemma4" in names
    ours = set(_engine.pre_tokenizer_names())
    assert [n for n in names if n not in ours] == []
    gpt2 = str(models_dir(llama_cpp_sdist) / "ggml-vocab-gpt-2.gguf")
    for name in names:
        v = vocab_at(gpt2, (("tokenizer.ggml.pre", name),))
        assert v.pre_known, name
        assert list(v.tokenize(b"Hello world 123", False, False)), name
    # a name llama.cpp does not know falls back to the default splitting
    assert not vocab_at(gpt2, (("tokenizer.ggml.pre", "no-such-pre"),)).pre_known


@functools.lru_cache(maxsize=None)
def pre_fixture() -> dict:
    return json.loads((DATA / "llama_cpp_pretokenizers.json").read_text(encoding="utf-8"))


def test_pre_fixture_covers_every_name(llama_cpp_sdist):
    fx = pre_fixture()
    assert fx["names"] == llama_cpp_pre_names(llama_cpp_sdist)
    assert [c["name"] for c in fx["cases"]] == fx["names"] + ["whitespace", "hybriddna", "t5"]


@pytest.mark.parametrize("index", range(len(pre_fixture()["cases"])), ids=[c["name"] for c in pre_fixture()["cases"]])
def test_pre_tokenizer_matches_llama_cpp(llama_cpp_sdist, index):
    fx = pre_fixture()
    case = fx["cases"][index]
    v = vocab_at(str(models_dir(llama_cpp_sdist) / case["vocab"]), tuple(sorted(case["overrides"].items())))
    compared = 0
    for text, want in zip(fx["texts"], case["tokens"]):
        if want is None:  # llama.cpp aborted on this text (an assertion in its BPE merge lookup)
            continue
        assert list(v.tokenize(text.encode("utf-8"), False, False)) == want, (case["name"], text)
        compared += 1
    assert compared >= 40
    assert list(v.tokenize(b"Hello", True, False)) == case["hello"]
    spaced = list(v.tokenize(" Hello , world ! it 's a ' b ' c 're d 'll ?".encode(), False, False))
    assert bytes(v.llama_detokenize(spaced, False, False)).hex() == case["detok"]
