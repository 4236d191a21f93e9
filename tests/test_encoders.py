"""Encoder architectures (bert, nomic-bert) against the numpy reference
(tests/encoder_ref.py): per-token states, native pooling (mean / cls / last),
many sequences packed into one batch attending only within themselves, the
Llama embedding API on them, and bad input raising clean errors.
"""
from __future__ import annotations

import numpy as np
import pytest

import encoder_ref as ER
from llamapy import Llama
from llamapy import _engine as E

ARCHS = ["bert", "nomic-bert"]
# (weight type, max error relative to the largest |value|)
TOLERANCE = {"F32": 3e-4, "F16": 3e-3, "Q8_0": 3e-2}
SEQS = [[2, 10, 12, 7, 40, 3], [2, 6, 7, 8, 3], [2, 15, 16, 17, 18, 19, 20, 21, 3], [2, 3]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-encoders")
    cache = {}

    def get(arch, wtype="F32", pooling=0):
        key = (arch, wtype, pooling)
        if key not in cache:
            cache[key] = ER.make_model(root, arch, wtype, pooling)
        return cache[key]

    return get


def new_ctx(path, **kw):
    kw.setdefault("n_ctx", 64)
    kw.setdefault("n_threads", 2)
    kw.setdefault("n_threads_batch", 2)
    kw.setdefault("embeddings", True)
    kw.setdefault("n_seq_max", 8)
    return E.Context(E.Model(str(path)), **kw)


def pack(seqs):
    tokens = [t for s in seqs for t in s]
    pos = [p for s in seqs for p in range(len(s))]
    ids = [i for i, s in enumerate(seqs) for _ in s]
    return tokens, pos, ids


def rel(got, ref):
    return float(np.abs(np.asarray(got) - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("wtype", ["F32", "F16", "Q8_0"])
def test_token_states_match_reference(tiny, arch, wtype):
    path, cfg, w = tiny(arch, wtype)
    ctx = new_ctx(path)
    assert ctx.pooling_type == 0
    for toks in SEQS:
        ctx.decode(tokens=toks, pos=list(range(len(toks))), seq_ids=[0] * len(toks))
        got = np.array(ctx.get_embeddings_all())
        assert got.shape == (len(toks), cfg.n_embd)
        if wtype == "Q8_0" and rel(got, ER.forward(cfg, w, toks, "F32")) < TOLERANCE["F32"]:
            continue  # the products kept the activations in F32 (the AVX2 level without AVX-VNNI)
        assert rel(got, ER.forward(cfg, w, toks, wtype)) < TOLERANCE[wtype]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("pooling", [1, 2, 3])
def test_pooling_matches_reference(tiny, arch, pooling):
    path, cfg, w = tiny(arch, "F32", pooling)
    ctx = new_ctx(path)
    assert ctx.pooling_type == pooling
    tokens, pos, ids = pack(SEQS)
    ctx.decode(tokens=tokens, pos=pos, seq_ids=ids)
    got = np.array(ctx.get_embeddings_seqs(len(SEQS)))
    for i, toks in enumerate(SEQS):
        ref = ER.pool(ER.forward(cfg, w, toks), pooling)
        assert rel(got[i], ref) < TOLERANCE["F32"]
        np.testing.assert_array_equal(np.array(ctx.get_embeddings_seq(i)), got[i])


@pytest.mark.parametrize("arch", ARCHS)
def test_packed_sequences_do_not_see_each_other(tiny, arch):
    path, cfg, _ = tiny(arch, "F32", 1)
    ctx = new_ctx(path)
    alone = []
    for toks in SEQS:
        ctx.decode(tokens=toks, pos=list(range(len(toks))), seq_ids=[0] * len(toks))
        alone.append(np.array(ctx.get_embeddings_seq(0)))
    tokens, pos, ids = pack(SEQS)
    ctx.decode(tokens=tokens, pos=pos, seq_ids=ids)
    packed = np.array(ctx.get_embeddings_seqs(len(SEQS)))
    np.testing.assert_allclose(packed, np.stack(alone), rtol=0, atol=1e-5)
    # Interleaved rows of two sequences (not contiguous in the batch).
    a, b = SEQS[0], SEQS[2]
    rows = [(0, t, p) for p, t in enumerate(a)] + [(1, t, p) for p, t in enumerate(b)]
    rows.sort(key=lambda r: (r[2], r[0]))
    ctx.decode(tokens=[r[1] for r in rows], pos=[r[2] for r in rows], seq_ids=[r[0] for r in rows])
    np.testing.assert_allclose(np.array(ctx.get_embeddings_seqs(2)), np.stack([alone[0], alone[2]]), rtol=0,
                               atol=1e-5)


def test_pooling_override_and_explicit_rows(tiny):
    path, cfg, w = tiny("bert", "F32", 1)
    toks = SEQS[2]
    h = ER.forward(cfg, w, toks)
    ctx = new_ctx(path, pooling_type=0)  # the file says mean; none asked
    ctx.decode(tokens=toks, pos=list(range(len(toks))), seq_ids=[0] * len(toks), logits=[0, 1] + [0] * (len(toks) - 2))
    assert ctx.n_outputs == 1
    assert rel(np.array(ctx.get_embeddings(0)), h[1]) < TOLERANCE["F32"]
    for p in (2, 3):
        ctx = new_ctx(path, pooling_type=p)
        ctx.decode(tokens=toks, pos=list(range(len(toks))), seq_ids=[0] * len(toks))
        assert rel(np.array(ctx.get_embeddings_seq(0)), ER.pool(h, p)) < TOLERANCE["F32"]


def test_model_properties(tiny):
    path, cfg, _ = tiny("bert", "F32", 1)
    m = E.Model(str(path))
    assert m.arch == "bert" and m.is_encoder and not m.causal
    assert m.pooling_type == 1 and m.n_pos_embd == cfg.n_ctx_train
    assert "bert" in E.Model.supported_archs and "nomic-bert" in E.Model.supported_archs
    n = E.Model(str(tiny("nomic-bert", "F32", 1)[0]))
    assert n.is_encoder and n.n_pos_embd == 0


def test_bad_input_raises(tiny):
    path, cfg, _ = tiny("bert", "F32", 1)
    ctx = new_ctx(path, n_ctx=64, n_batch=64)
    with pytest.raises(ValueError, match="learned positions"):
        ctx.decode(tokens=[2] * 49, pos=list(range(49)), seq_ids=[0] * 49)
    with pytest.raises(ValueError, match="out of range"):
        ctx.decode(tokens=[2, 999], pos=[0, 1], seq_ids=[0, 0])
    with pytest.raises(ValueError, match="n_batch"):
        ctx.decode(tokens=[2] * 65, pos=list(range(65)), seq_ids=[0] * 65)
    with pytest.raises(ValueError, match="sequence id"):
        ctx.decode(tokens=[2, 3], pos=[0, 1], seq_ids=[0, 99])
    with pytest.raises(ValueError, match="encoder"):
        ctx.get_logits(0)
    with pytest.raises(ValueError, match="no rows"):
        ctx.get_embeddings_seq(5)
    # The context still works after each refusal.
    ctx.decode(tokens=[2, 6, 3], pos=[0, 1, 2], seq_ids=[0, 0, 0])
    assert np.isfinite(np.array(ctx.get_embeddings_seq(0))).all()
    plain = new_ctx(path, embeddings=False)
    with pytest.raises(ValueError, match="embeddings=True"):
        plain.decode(tokens=[2, 3], pos=[0, 1], seq_ids=[0, 0])
    with pytest.raises(ValueError, match="rank.*classifier head"):  # a reranker's pooling, and no reranker
        new_ctx(path, pooling_type=4)
    with pytest.raises(ValueError, match="pooling_type"):
        new_ctx(path, pooling_type=7)
    state = ctx.state_get()  # encoders keep no logits: the state has none
    ctx.state_set(state)


def test_wordpiece_and_llama_api_on_tiny_model(tiny):
    path, cfg, w = tiny("bert", "F32", 1)
    llm = Llama(str(path), embedding=True, n_ctx=48, verbose=False)
    toks = llm.tokenize(b"The cat sat, unbelievable!")
    # [CLS] the cat sat , un ##believ ##able ! [SEP]
    assert toks == [2, 5, 6, 7, 22, 16, 38, 37, 24, 3]
    vec = llm.embed("The cat sat, unbelievable!")
    ref = ER.pool(ER.forward(cfg, w, toks), 1)
    assert rel(vec, ref) < TOLERANCE["F32"]
    many = llm.embed(["hello world", "the dog ran fast", "zebra"])
    assert len(many) == 3 and all(len(v) == cfg.n_embd for v in many)
    assert llm.tokenize(b"zebra") == [2, 1, 3]  # unknown word -> [UNK]
    with pytest.raises(ValueError, match="exceed"):
        llm.embed("the cat " * 40, truncate=False)
    assert len(llm.embed("the cat " * 40)) == cfg.n_embd  # truncated to the 48 learned positions
