"""Llama.embed / create_embedding with llama-cpp-python 0.3.x semantics, on
the real all-MiniLM-L6-v2 (converted by ``llamapy convert``) held against
sentence-transformers' recorded embeddings, on Gemma 3 270M as a decoder
with mean / last pooling, and the converter's GGUF layout (llama.cpp names).
"""
from __future__ import annotations

import numpy as np
import pytest

import minilm_ref as M
from llamapy import Llama
from llamapy import _engine as E


def cosines(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.fixture(scope="module")
def minilm():
    """(outtype) -> Llama with embedding=True, n_batch 256 (sentence-transformers' max_seq_length)."""
    cache = {}

    def get(outtype="f32", **kw):
        key = (outtype, tuple(sorted(kw.items())))
        if key not in cache:
            kw.setdefault("n_batch", 256)
            cache[key] = Llama(M.gguf_path(outtype), embedding=True, verbose=False, n_threads=2, **kw)
        return cache[key]

    return get


@pytest.mark.parametrize("outtype", ["f32", "f16"])
def test_cosine_with_sentence_transformers(minilm, outtype):
    ref = M.reference()
    llm = minilm(outtype)
    got = np.array(llm.embed(ref["sentences"], normalize=True))
    assert got.shape == ref["st_embeddings"].shape
    # Same tokens as sentence-transformers up to its 256-token limit; past it,
    # llama-cpp-python's truncation (the first 256 ids, no final [SEP]) differs
    # from sentence-transformers' (254 ids + [SEP]) by one token.
    short = np.array([len(ids) <= 256 for ids in ref["ids_list"]])
    cos_st = cosines(got, ref["st_embeddings"])
    cos_first = cosines(got, ref["st_first256"])
    assert cos_st[short].min() >= 0.999, cos_st
    assert cos_first.min() >= 0.999, cos_first
    assert cos_st[~short].min() >= 0.998, cos_st
    assert (~short).sum() >= 2  # the set does hit truncation


def test_q8_0_close_to_sentence_transformers(minilm):
    ref = M.reference()
    got = np.array(minilm("q8_0").embed(ref["sentences"][:12]))
    assert cosines(got, ref["st_first256"][:12]).min() >= 0.995


def test_q8_0_close_to_f32_and_independent_of_the_batch(minilm):
    """The Q8_0 file's products are int8 ones (an encoder takes Q8_0's throughput panel at the
    AVX-512 level, VNNI): cosine >= 0.999 against the F32 file on the fixture sentences but the
    three of 2-3 tokens, where quantization alone costs more (llama.cpp's own Q8_0 against its
    F32: 0.99843 on the 2-token one), and >= 0.998 on those; a batch gives what one sentence
    at a time gives."""
    ref = M.reference()
    q8 = minilm("q8_0")
    got = np.array(q8.embed(ref["sentences"]))
    cos = cosines(got, np.array(minilm("f32").embed(ref["sentences"])))
    tiny = np.array([len(ids) <= 3 for ids in ref["ids_list"]])
    assert tiny.sum() == 3
    assert cos[~tiny].min() >= 0.999, cos
    assert cos.min() >= 0.998, cos
    single = np.array([q8.embed(t) for t in ref["sentences"]])
    np.testing.assert_allclose(got, single, rtol=0, atol=2e-5 * np.abs(single).max())


def test_tokens_equal_model_tokenizer(minilm):
    ref = M.reference()
    llm = minilm("f32")
    for text, ids in zip(ref["sentences"], ref["ids_list"]):
        assert llm.tokenize(text.encode("utf-8")) == ids


def test_batch_of_100_equals_one_by_one(minilm):
    ref = M.reference()
    llm = minilm("f32")
    texts = [ref["sentences"][i % 17] + f" number {i}" for i in range(100)]
    batched = np.array(llm.embed(texts))
    single = np.array([llm.embed(t) for t in texts])
    np.testing.assert_allclose(batched, single, rtol=0, atol=2e-5 * np.abs(single).max())


@pytest.mark.parametrize("outtype", ["f32", "q8_0"])
def test_mixed_lengths_batch_gives_one_by_one_bits(minilm, outtype):
    """Encoders take the throughput products (F32 / F16: the one-chain packed product; Q8_0:
    the int8 panel), whose rows do not depend on the batch: many sequences of mixed lengths
    packed into a few decodes (an empty text, i.e. [CLS] [SEP]; one word; an input truncated
    to n_batch; a 242-token one that fills most of a batch; the fixture sentences) give the
    bits each gives alone, and so does another thread count."""
    ref = M.reference()
    llm = minilm(outtype)
    texts = ["", "a", "word " * 400, "tok " * 120] + list(ref["sentences"][:20]) + ["x y"]
    assert [len(llm.tokenize(t.encode("utf-8"))) for t in texts[:3]] == [2, 3, 402]
    batched = np.array(llm.embed(texts))
    single = np.array([llm.embed(t) for t in texts])
    np.testing.assert_array_equal(batched, single)
    one_thread = Llama(M.gguf_path(outtype), embedding=True, verbose=False, n_threads=1, n_batch=256)
    np.testing.assert_array_equal(np.array(one_thread.embed(texts)), batched)


def test_embed_api_shapes_and_options(minilm):
    llm = minilm("f32")
    v = llm.embed("hello world")
    assert isinstance(v, list) and len(v) == 384 and isinstance(v[0], float)
    vs, n = llm.embed(["hello world", "another one"], return_count=True)
    assert len(vs) == 2 and n == len(llm.tokenize(b"hello world")) + len(llm.tokenize(b"another one"))
    u = np.array(llm.embed("hello world", normalize=True))
    assert abs(np.linalg.norm(u) - 1.0) < 1e-5
    np.testing.assert_allclose(u, np.array(v) / np.linalg.norm(v), atol=1e-6)
    r = llm.create_embedding(["a b", "c d e"])
    assert r["object"] == "list" and r["model"] == llm.model_path
    assert [d["index"] for d in r["data"]] == [0, 1] and all(d["object"] == "embedding" for d in r["data"])
    assert r["usage"]["prompt_tokens"] == r["usage"]["total_tokens"] == 4 + 5
    assert llm.create_embedding("x", model="name")["model"] == "name"
    assert len(llm.create_embedding("x")["data"]) == 1
    assert llm.pooling_type() == 1
    with pytest.raises(TypeError):
        llm.embed(["ok", 3])


def test_embed_array_equals_embed(minilm):
    """embed_array (the Ray Embedder's path) is embed's numbers as one (n, n_embd) float32
    array; it refuses unpooled contexts and non-embedding Llamas as embed does."""
    from llamapy._embedding import embed_array

    llm = minilm("f32")
    texts = [f"sentence number {i} about {w}" for i, w in enumerate(["cats", "dogs", "the sea"] * 30)]
    for normalize in (False, True):
        got = embed_array(llm, texts, normalize=normalize)
        assert got.dtype == np.float32 and got.shape == (len(texts), 384) and got.flags.c_contiguous
        assert got.tolist() == llm.embed(texts, normalize=normalize)  # the same floats
    assert embed_array(llm, []).shape == (0, 384)
    with pytest.raises(ValueError, match="exceed"):
        embed_array(llm, ["word " * 400], truncate=False)
    with pytest.raises(TypeError):
        embed_array(llm, ["ok", None])
    with pytest.raises(ValueError, match="pooling type is none"):
        embed_array(minilm("f32", pooling_type=0), ["hello"])


def test_pooling_none_and_override(minilm):
    llm = minilm("f32", pooling_type=0)
    assert llm.pooling_type() == 0
    per_token = llm.embed(["hello world", "a longer sentence here"])
    assert [len(x) for x in per_token] == [4, 6] and len(per_token[0][0]) == 384
    mean = minilm("f32").embed(["hello world", "a longer sentence here"])
    np.testing.assert_allclose(np.array(per_token[1]).mean(0), mean[1], atol=1e-5)
    cls = minilm("f32", pooling_type=2).embed("hello world")
    np.testing.assert_allclose(cls, per_token[0][0], atol=1e-5)
    last = minilm("f32", pooling_type=3).embed("hello world")
    np.testing.assert_allclose(last, per_token[0][-1], atol=1e-5)


def test_truncation_and_errors(minilm):
    llm = minilm("f32")
    long = "word " * 400
    assert len(llm.embed(long)) == 384  # truncated to n_batch tokens
    with pytest.raises(ValueError, match="exceed batch size"):
        llm.embed(long, truncate=False)
    plain = Llama(M.gguf_path("f32"), verbose=False)
    with pytest.raises(RuntimeError, match="embedding=True"):
        plain.embed("hello")
    with pytest.raises(RuntimeError, match="embedding=True"):
        plain.create_embedding("hello")
    with pytest.raises(ValueError, match="encoder"):
        plain.eval([101, 102])
    # More inputs than sequences per batch still works (several decodes).
    small = Llama(M.gguf_path("f32"), embedding=True, verbose=False, n_batch=8, n_ctx=64)
    out = small.embed(["a", "b c", "d e f", "g"])
    np.testing.assert_allclose(out[3], minilm("f32").embed("g"), atol=1e-5)


def test_converted_file_follows_llama_cpp_layout():
    import gguf

    r = gguf.GGUFReader(M.gguf_path("f16"))
    kv = {k: f for k, f in r.fields.items()}

    def val(key):
        f = kv[key]
        return f.contents() if hasattr(f, "contents") else f.parts[f.data[0]]

    assert val("general.architecture") == "bert"
    for key, want in [("bert.context_length", 512), ("bert.embedding_length", 384), ("bert.feed_forward_length", 1536),
                      ("bert.block_count", 6), ("bert.attention.head_count", 12), ("bert.pooling_type", 1),
                      ("tokenizer.ggml.token_type_count", 2), ("tokenizer.ggml.bos_token_id", 101),
                      ("tokenizer.ggml.seperator_token_id", 102), ("tokenizer.ggml.unknown_token_id", 100),
                      ("tokenizer.ggml.padding_token_id", 0), ("tokenizer.ggml.mask_token_id", 103)]:
        assert int(val(key)) == want, key
    assert val("bert.attention.causal") is False or int(val("bert.attention.causal")) == 0
    assert abs(float(val("bert.attention.layer_norm_epsilon")) - 1e-12) < 1e-15
    assert val("tokenizer.ggml.model") == "bert"
    toks = val("tokenizer.ggml.tokens")
    assert toks[101] == "[CLS]" and toks[7592] == "\u2581hello" and toks[2015] == "s"  # "##s"
    names = {t.name: t for t in r.tensors}
    expected = {"token_embd.weight", "position_embd.weight", "token_types.weight", "token_embd_norm.weight",
                "token_embd_norm.bias"}
    for i in range(6):
        for t in ("attn_q", "attn_k", "attn_v", "attn_output", "attn_output_norm", "ffn_up", "ffn_down",
                  "layer_output_norm"):
            expected |= {f"blk.{i}.{t}.weight", f"blk.{i}.{t}.bias"}
    assert set(names) == expected
    assert names["blk.0.attn_q.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert names["position_embd.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert names["blk.0.attn_output_norm.bias"].tensor_type == gguf.GGMLQuantizationType.F32


# ---------------------------------------------------------------------------
# A decoder as an embedding model
# ---------------------------------------------------------------------------

@pytest.mark.model
def test_decoder_mean_and_last_pooling(gemma_path):
    texts = ["The cat sat on the mat.", "Embeddings from a decoder", "x"]
    none = Llama(gemma_path, embedding=True, pooling_type=0, n_ctx=256, verbose=False)
    per_token = none.embed(texts)
    mean = Llama(gemma_path, embedding=True, pooling_type=1, n_ctx=256, verbose=False)
    last = Llama(gemma_path, embedding=True, pooling_type=3, n_ctx=256, verbose=False)
    pooled_mean, pooled_last = mean.embed(texts), last.embed(texts)
    for i, toks in enumerate(per_token):
        t = np.array(toks)
        np.testing.assert_allclose(pooled_mean[i], t.mean(0), rtol=0, atol=2e-4 * np.abs(t).max())
        np.testing.assert_allclose(pooled_last[i], t[-1], rtol=0, atol=2e-4 * np.abs(t).max())
    single = [mean.embed(t) for t in texts]
    np.testing.assert_allclose(pooled_mean, single, rtol=0, atol=2e-4 * np.abs(single).max())
    # The same Llama still generates (logits of explicitly asked rows are computed).
    out = mean.create_completion("The capital of France is", max_tokens=4, temperature=0.0)
    assert isinstance(out["choices"][0]["text"], str)
