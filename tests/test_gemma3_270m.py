"""Gemma 3 270M (Q4_K_M) against llama.cpp's outputs
(tests/data/gemma-3-270m-q4_k_m.llama_cpp.json, a verbatim copy of shared/fixtures, made with
llama-cpp-python 0.3.36, 2 threads, flash attention off).

This model with quantized activations is numerically chaotic: moving one
input by a single float ulp (relative 1e-7) moves its logits by up to ~0.5
(see test_logits_are_chaotic). Agreement with llama.cpp is therefore only
exact where every kernel rounds exactly as llama.cpp's does; the tests hold
the engine to what is robust to that noise (perplexity, the llama.cpp token
being our best or near-best choice at every step of its greedy run).
llama.cpp does not meet an exact target against itself either: evaluating
the same prompts in chunks of 1-4 tokens instead of one batch changes its
greedy continuations of 2-4 of the 8 prompts (tests/test_gemma3_vs_llama_cpp.py
holds us to exactly that standard).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llamapy import _engine as E
from lm_metrics import perplexity

pytestmark = pytest.mark.model

FIXTURE = Path(__file__).parent / "data" / "gemma-3-270m-q4_k_m.llama_cpp.json"


@pytest.fixture(scope="module")
def setup(gemma_path):
    path = gemma_path
    model = E.Model(path)
    return model, E.Vocab.from_file(path), json.loads(FIXTURE.read_text())


def prompt_ids(vocab, text):
    return vocab.tokenize(text, True, False)


def test_model_facts(setup):
    model, vocab, _ = setup
    assert (model.arch, model.n_layer, model.n_embd, model.n_head, model.n_head_kv) == ("gemma3", 18, 640, 4, 1)
    assert model.n_vocab == 262144 and model.n_swa == 512 and model.head_dim == 256
    assert model.desc() == "gemma3 270M Q4_K - Medium"


def test_perplexity_within_one_percent(setup):
    model, vocab, fx = setup
    p = fx["perplexity"]
    ids = prompt_ids(vocab, p["text"])
    assert len(ids) - 1 == p["tokens_scored"] and len(ids) <= p["n_ctx"]
    ctx = E.Context(model, n_ctx=p["n_ctx"], n_batch=512, n_threads=2)
    n = len(ids)
    ctx.decode(tokens=ids, pos=list(range(n)), seq_ids=[0] * n, logits=[1] * n)
    ppl = perplexity(np.array(ctx.get_logits_all()), ids)
    assert abs(ppl / p["ppl"] - 1) < 0.01, f"perplexity {ppl:.4f}, llama.cpp {p['ppl']}"


def test_llama_cpp_greedy_run_is_our_choice(setup):
    """Teacher forcing: along llama.cpp's greedy continuation of each prompt,
    its token is our argmax at almost every step and never far from it."""
    model, vocab, fx = setup
    ctx = E.Context(model, n_ctx=512, n_threads=2)
    hits = total = 0
    for g in fx["greedy"]:
        ids = prompt_ids(vocab, g["prompt"])
        seq = ids + g["ids"]
        n = len(seq)
        want = [0] * (len(ids) - 1) + [1] * len(g["ids"]) + [0]
        ctx.kv_clear()
        ctx.decode(tokens=seq, pos=list(range(n)), seq_ids=[0] * n, logits=want)
        logits = np.array(ctx.get_logits_all())
        for row, tok in zip(logits, g["ids"]):
            rank = int((row > row[tok]).sum())
            assert rank <= 3 and row.max() - row[tok] < 1.0, (g["prompt"], tok, rank)
            hits += rank == 0
            total += 1
    assert hits / total >= 0.95, f"llama.cpp's token was our argmax at {hits}/{total} steps"


def test_top_logits_close(setup):
    model, vocab, fx = setup
    ctx = E.Context(model, n_ctx=512, n_threads=2)
    for t in fx["top_logits"]:
        ids = prompt_ids(vocab, t["prompt"])
        ctx.kv_clear()
        ctx.decode(tokens=ids, pos=list(range(len(ids))), seq_ids=[0] * len(ids))
        got = np.array(ctx.get_logits())
        d = np.abs(got[t["ids"]] - np.array(t["logits"]))
        # llama.cpp against itself on these prompts (prompt in chunks of 1-3
        # tokens instead of one batch): mean difference up to 0.26, largest 0.59.
        # Other kernels entirely may differ about twice that.
        assert d.mean() < 0.5 and d.max() < 1.2, (t["prompt"], d)
        assert len(set(np.argsort(-got)[:10].tolist()) & set(t["ids"])) >= 8


def test_logits_are_chaotic(setup):
    """The premise of the tolerances above: a one-ulp change of the input
    embeddings moves the logits by far more than 0.02."""
    model, vocab, fx = setup
    import gguf

    ids = prompt_ids(vocab, fx["greedy"][0]["prompt"])
    r = gguf.GGUFReader(model.path)
    emb = next(t for t in r.tensors if t.name == "token_embd.weight")
    rows = gguf.quants.dequantize(emb.data[ids], emb.tensor_type).astype(np.float32)
    rows *= np.float32(np.sqrt(np.float32(model.n_embd)))
    outs = []
    for nudge in (0.0, 1.2e-7):
        ctx = E.Context(model, n_ctx=64, n_threads=2)
        ctx.decode(embd=(rows * np.float32(1 + nudge)).astype(np.float32), pos=list(range(len(ids))),
                   seq_ids=[0] * len(ids))
        outs.append(np.array(ctx.get_logits()))
    assert np.abs(outs[1] - outs[0]).max() > 0.05
