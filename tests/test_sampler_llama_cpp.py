"""Seeded sampling draws llama.cpp's tokens: on the same logits, the engine's
sampler chain picks what llama-cpp-python 0.3.36's chain picks, seed by seed
and step by step (tests/data/llama_cpp_sampler_*, recorded with
tools/record_sampler_fixtures.py: llama.cpp's samplers applied to stored
logits, the drawn token accepted after each step)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import llamapy
from llamapy import _engine
from llamapy import _internals as internals

DATA = Path(__file__).parent / "data"
DOC = json.loads((DATA / "llama_cpp_sampler_draws.json").read_text())
LOGITS = np.load(DATA / "llama_cpp_sampler_logits.npy")


def engine_sampler(kw: dict, seed: int):
    """The sampler Llama.sample builds for llama-cpp-python's keywords (the shared factory)."""
    from llamapy._sampling import SamplingParams, native_sampler

    p = SamplingParams(temperature=kw["temp"], top_k=kw["top_k"], top_p=kw["top_p"], min_p=kw["min_p"],
                       typical_p=kw["typical_p"], repeat_penalty=kw["repeat_penalty"],
                       frequency_penalty=kw["frequency_penalty"], presence_penalty=kw["presence_penalty"],
                       mirostat_mode=kw["mirostat_mode"], mirostat_tau=kw["mirostat_tau"],
                       mirostat_eta=kw["mirostat_eta"], logit_bias=kw["logit_bias"])
    return native_sampler(p, DOC["n_vocab"], penalty_last_n=DOC["penalty_last_n"], seed=seed,
                          grammar_vocab=lambda: None)


@pytest.mark.parametrize("case", DOC["cases"], ids=[c["name"] for c in DOC["cases"]])
def test_engine_sampler_draws_llama_cpp_tokens(case):
    kw = case["settings"]
    for seed, expected in case["draws"].items():
        s = engine_sampler(kw, int(seed))
        got = []
        for step in range(DOC["steps"]):
            t = int(s.sample(LOGITS[0 if kw["same_row"] else step]))
            s.accept(t)
            got.append(t)
        assert got == expected, f"seed {seed}"


def test_llama_sample_uses_the_same_chain(gemma_path):
    """Llama.sample with a seed: the engine chain above, fed the context's logits."""
    llm = llamapy.Llama(gemma_path, n_ctx=64, n_threads=2, verbose=False)
    llm.eval(llm.tokenize(b"Once upon a time"))
    logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    for seed in (1, 42, 2**32 + 7):  # seeds are llama.cpp's uint32_t: 2**32 + 7 draws as 7
        llm.set_seed(seed)
        t = llm.sample(temp=0.9)
        ref = _engine.Sampler(len(logits), temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, seed=seed % 2**32)
        assert t == ref.sample(logits)


def test_internals_chain_matches_the_recording():
    """The same draws through llamapy._internals.LlamaSampler (llama-cpp-python's stage API)."""
    case = next(c for c in DOC["cases"] if c["name"] == "default")
    kw = case["settings"]

    class Logits:  # stands in for a context: the sampler reads one row of logits
        row = None

        def _logits_row(self, idx):
            return self.row

    ctx = Logits()
    for seed, expected in case["draws"].items():
        s = internals.LlamaSampler()
        s.add_penalties(DOC["n_vocab"], DOC["penalty_last_n"], 1.0, 0.0, 0.0)
        s.add_top_k(kw["top_k"])
        s.add_typical(kw["typical_p"], 1)
        s.add_top_p(kw["top_p"], 1)
        s.add_min_p(kw["min_p"], 1)
        s.add_temp(kw["temp"])
        s.add_dist(int(seed))
        got = []
        for step in range(DOC["steps"]):
            ctx.row = LOGITS[step]
            got.append(s.sample(ctx))
        assert got == expected, f"seed {seed}"


def test_default_seed_is_random_and_other_seeds_repeat():
    row = LOGITS[0]
    draws = {int(_engine.Sampler(DOC["n_vocab"], temperature=-1.0, seed=0xFFFFFFFF).sample(row)) for _ in range(40)}
    assert len(draws) > 1  # LLAMA_DEFAULT_SEED: a fresh random seed per sampler
    again = {int(_engine.Sampler(DOC["n_vocab"], temperature=-1.0, seed=5).sample(row)) for _ in range(10)}
    assert len(again) == 1


@pytest.mark.parametrize("params", [
    dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    dict(temperature=1.2, top_k=3, top_p=1.0, min_p=0.0),  # fewer allowed tokens than k at times
    dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.1),   # min-p on the unsorted (id-order) list
    dict(temperature=-1.0),                                  # the raw softmax, walked in id order
    dict(temperature=1.0, mirostat=2),
])
@pytest.mark.parametrize("n_extra", [0, 3000])
def test_grammar_removes_tokens_before_truncation(params, n_extra):
    """llama.cpp's grammar stage sets the logits of disallowed tokens to -inf before
    top-k and the rest: a constrained draw is the unconstrained draw on those logits.
    With 3,000 extra word tokens (allowed inside strings only) top-k probes the best
    tokens first and filters the whole vocabulary where too few of them are allowed."""
    from test_grammar import JSON_VALUE_GBNF, make_vocab

    texts, eos = make_vocab(extra=[b"w%d" % i for i in range(n_extra)])
    g = _engine.Grammar(JSON_VALUE_GBNF)
    vocab = _engine.GrammarVocab(texts, [eos])
    for seed in range(4):
        s = _engine.Sampler(len(texts), seed=seed, **params)
        s.set_grammar(g, vocab)
        plain = _engine.Sampler(len(texts), seed=seed, **params)
        m = _engine.GrammarMatcher(g, vocab)
        rng = np.random.default_rng(seed)
        for _ in range(25):
            logits = (rng.standard_normal(len(texts)) * 2).astype(np.float32)
            masked = np.full_like(logits, -np.inf)
            allowed = m.allowed_tokens()
            masked[allowed] = logits[allowed]
            got = s.sample(logits)
            assert got == plain.sample(masked)
            if got == eos:
                break
            s.accept(got)
            plain.accept(got)
            m.accept_token(got)


def test_default_seed_rule_of_llama_cpp_python(gemma_path):
    """``seed or LLAMA_DEFAULT_SEED``; create_completion without a seed derives one
    from the current seed (random.Random(seed).randint), so two fresh Llamas agree."""
    import random

    texts = []
    for seed in (llamapy.LLAMA_DEFAULT_SEED, 0):
        llm = llamapy.Llama(gemma_path, n_ctx=64, n_threads=2, seed=seed, verbose=False)
        assert llm._seed == llamapy.LLAMA_DEFAULT_SEED
        out = llm.create_completion("Once upon a time", max_tokens=6, temperature=1.0)
        texts.append(out["choices"][0]["text"])
        assert llm._seed == random.Random(llamapy.LLAMA_DEFAULT_SEED).randint(0, 2**32)
    assert texts[0] == texts[1]


@pytest.mark.parametrize("params", [
    dict(), dict(top_k=0, top_p=0.9), dict(top_k=0, top_p=1.0, min_p=0.1), dict(temperature=-1.0),
    dict(typical_p=0.7, top_k=0), dict(mirostat=1), dict(mirostat=2),
])
def test_nan_and_inf_logits_still_give_a_token(params):
    """A logits processor may return NaN or inf: the stages' sorts stay defined (NaN
    ranks as -inf) and a token id inside the vocabulary comes back."""
    rng = np.random.default_rng(7)
    n = 3000
    for trial in range(12):
        logits = (rng.standard_normal(n) * 3).astype(np.float32)
        logits[rng.integers(0, n, size=int(rng.integers(1, n)))] = np.nan
        if trial % 3 == 0:
            logits[:] = np.nan
        if trial % 4 == 0:
            logits[rng.integers(0, n, 20)] = np.inf
        t = _engine.Sampler(n, seed=trial, **params).sample(logits)
        assert 0 <= t < n
