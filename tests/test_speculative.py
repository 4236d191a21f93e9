"""Speculative decoding with a draft model (llama-cpp-python's
``draft_model=LlamaPromptLookupDecoding(...)``): drafted tokens are checked
in one batch, and because the engine's results do not depend on batching the
output is exactly that of plain decoding, with fewer forward passes."""
from __future__ import annotations

import numpy as np
import pytest

from llamapy import Llama
from llamapy.llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding

find = LlamaPromptLookupDecoding.find_candidate_pred_tokens


@pytest.mark.parametrize("ids,max_ngram,k,expected", [
    ([1, 2, 3, 4, 1, 2], 2, 10, [3, 4, 1, 2]),   # the bigram [1, 2] first seen at 0
    ([1, 2, 3, 4, 1, 2], 2, 2, [3, 4]),
    ([5, 1, 9, 1], 2, 10, [9, 1]),               # no earlier [9, 1]: the unigram [1]
    ([7, 7, 7], 2, 10, [7]),                     # [7, 7] at 0, followed by one token
    ([1, 2, 3], 3, 10, []),                      # nothing repeats
    ([4], 2, 10, []),
    ([3, 1, 3, 2, 3], 1, 10, [1, 3, 2, 3]),      # the first occurrence wins
])
def test_prompt_lookup(ids, max_ngram, k, expected):
    got = find(np.array(ids, dtype=np.intc), max_ngram, k)
    assert got.dtype == np.intc and got.tolist() == expected


def test_prompt_lookup_arguments():
    with pytest.raises(ValueError):
        LlamaPromptLookupDecoding(max_ngram_size=0)
    d = LlamaPromptLookupDecoding(num_pred_tokens=3)
    assert isinstance(d, LlamaDraftModel)
    assert d(np.array([1, 2, 3, 1, 2], dtype=np.intc)).tolist() == [3, 1, 2]


class CountingContext:
    """Forwards to the engine context, counting decode calls."""

    def __init__(self, ctx):
        self._ctx, self.decodes = ctx, 0

    def decode(self, *a, **kw):
        self.decodes += 1
        return self._ctx.decode(*a, **kw)

    def __getattr__(self, name):
        return getattr(self._ctx, name)


def generated(llm, prompt, n, **kw):
    out = []
    for t in llm.generate(prompt, **kw):
        out.append(t)
        if len(out) == n:
            break
    return out


PROMPTS = [
    "The largest planet in the solar system is Jupiter. The largest planet in the solar system is",
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4,",
]


@pytest.mark.model
@pytest.mark.parametrize("temp", [0.0, 0.8])
def test_drafting_changes_nothing_but_the_number_of_passes(gemma_path, temp):
    plain = Llama(gemma_path, n_ctx=256, n_threads=2, seed=11, verbose=False)
    spec = Llama(gemma_path, n_ctx=256, n_threads=2, seed=11, verbose=False,
                 draft_model=LlamaPromptLookupDecoding(num_pred_tokens=8))
    spec._ctx = counter = CountingContext(spec._ctx)
    total = 0
    for text in PROMPTS:
        prompt = plain.tokenize(text.encode())
        a = generated(plain, prompt, 40, temp=temp)
        before = counter.decodes
        b = generated(spec, prompt, 40, temp=temp)
        assert a == b, text
        total += counter.decodes - before
    # 3 prompts x 40 tokens would take 120 passes one token at a time
    assert total < 0.8 * 3 * 40, total


@pytest.mark.model
def test_completion_with_a_draft_model(gemma_path):
    kw = dict(n_ctx=256, n_threads=2, seed=3, verbose=False)
    prompt = PROMPTS[0]
    plain = Llama(gemma_path, **kw).create_completion(prompt, max_tokens=24, temperature=0.0, stop=["\n\n"])
    spec_llm = Llama(gemma_path, draft_model=LlamaPromptLookupDecoding(), **kw)
    spec = spec_llm.create_completion(prompt, max_tokens=24, temperature=0.0, stop=["\n\n"])
    assert spec["choices"][0]["text"] == plain["choices"][0]["text"]
    assert spec["usage"] == plain["usage"]
    chunks = list(spec_llm.create_completion(prompt, max_tokens=24, temperature=0.0, stop=["\n\n"], stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks) == plain["choices"][0]["text"]


@pytest.mark.model
def test_bad_draft_models(gemma_path):
    with pytest.raises(TypeError, match="draft_model"):
        Llama(gemma_path, n_ctx=64, verbose=False, draft_model="lookup")

    class Wild(LlamaDraftModel):
        def __call__(self, input_ids, /, **kwargs):
            return np.array([10**9], dtype=np.int64)

    llm = Llama(gemma_path, n_ctx=64, verbose=False, draft_model=Wild())
    with pytest.raises(ValueError, match="vocabulary"):
        generated(llm, [2, 818], 3, temp=0.0)
