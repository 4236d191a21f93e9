"""Rerankers (pooling rank) against llama.cpp's recorded scores (tests/data/rerank, made by
tools/make_rerank_fixtures.py with llama-cpp-python 0.3.36): an XLM-RoBERTa cross-encoder
(bge-reranker's shape: dense + tanh + out_proj), a BERT one (out_proj only, as llama.cpp's
converter keeps it) and a Qwen3-Reranker (the LM head's yes / no rows, softmaxed, read at the
last token). Per family: the prompt tokens llama-server's format_prompt_rerank makes, the
scores, their order, embed() on such a model; then top_n / return_documents, batching,
errors (no classifier head, wrong context, bad input, too long) and the server's
/v1/rerank in the Jina / Cohere shape (aliases, API key, 400s, 501s).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import needs

from llamapy import Llama
from llamapy import _engine as E
from llamapy import _rerank
from llamapy.llama_cpp import LLAMA_POOLING_TYPE_RANK

DATA = Path(__file__).parent / "data" / "rerank"
RECORD = json.loads((DATA / "record.json").read_text())
FAMILIES = ["xlmr", "bert", "qwen3"]
# |llamapy - llama.cpp| allowed per score. The encoders run llama.cpp's ops in F32 and agree
# to ~1e-7 at AVX2 (llama.cpp's build) and ~6e-6 at the scalar level (its dot products add
# in another order); the decoder's softmaxed yes / no probabilities to ~2e-5 (its attention
# accumulates in another order). The recorded scores' smallest gaps are ~4e-5 (bert),
# ~1e-4 (xlmr) and ~0.03 (qwen3), so the order is checked too.
TOLERANCE = {"xlmr": 2e-5, "bert": 2e-5, "qwen3": 1e-4}
QUERY, DOCS = RECORD["query"], RECORD["documents"]
NON_RERANKER = str(Path(__file__).parent / "data" / "moe" / "qwen3moe" / "qwen3moe-q8_0.gguf")


def path_of(fam: str) -> str:
    return str(DATA / RECORD["families"][fam]["file"])


def open_reranker(fam: str, **kw) -> Llama:
    kw.setdefault("n_ctx", 512)
    kw.setdefault("n_threads", 2)
    return Llama(path_of(fam), embedding=True, pooling_type=LLAMA_POOLING_TYPE_RANK, verbose=False, **kw)


@pytest.fixture(scope="module")
def rerankers():
    llms = {fam: open_reranker(fam) for fam in FAMILIES}
    yield llms
    for llm in llms.values():
        llm.close()


def test_manifest_matches_the_files():
    import hashlib

    manifest = json.loads((DATA / "manifest.json").read_text())
    for name, entry in manifest.items():
        data = (DATA / name).read_bytes()
        assert len(data) == entry["bytes"] and hashlib.sha256(data).hexdigest() == entry["sha256"], name


@pytest.mark.parametrize("fam", FAMILIES)
def test_model_is_a_reranker(rerankers, fam):
    llm = rerankers[fam]
    rec = RECORD["families"][fam]
    assert llm.model.has_classifier
    assert llm.model.n_cls_out == rec["n_cls_out"]
    assert llm.pooling_type() == LLAMA_POOLING_TYPE_RANK
    assert llm._ctx.n_embd_seq == rec["n_cls_out"]
    assert (llm.metadata.get(_rerank.TEMPLATE_KEY) or None) == rec["rerank_template"]


@pytest.mark.parametrize("fam", FAMILIES)
def test_prompt_tokens_as_llama_server_makes_them(rerankers, fam):
    rec = RECORD["families"][fam]
    for pair in rec["pairs"]:
        assert _rerank.prompt_tokens(rerankers[fam], QUERY, pair["document"]) == pair["tokens"], pair["document"]


@pytest.mark.parametrize("fam", FAMILIES)
def test_scores_and_order_match_llama_cpp(rerankers, fam):
    rec = RECORD["families"][fam]
    results = rerankers[fam].rerank(QUERY, DOCS)
    assert [r["index"] for r in results] == rec["order"]
    got = {r["index"]: r["relevance_score"] for r in results}
    for pair in rec["pairs"]:
        assert abs(got[pair["index"]] - pair["scores"][0]) < TOLERANCE[fam], pair["document"]
    assert all(set(r) == {"index", "relevance_score"} for r in results)
    assert all(isinstance(r["relevance_score"], float) for r in results)


@pytest.mark.parametrize("fam", FAMILIES)
def test_embed_gives_the_classifier_scores(rerankers, fam):
    # llama.cpp's pooled output with pooling rank: n_cls_out floats (Qwen3-Reranker: P(yes), P(no))
    rec = RECORD["families"][fam]
    llm = rerankers[fam]
    got = llm.embed([e["text"] for e in rec["embed"]])
    for g, e in zip(got, rec["embed"]):
        assert llm.tokenize(e["text"].encode()) == e["tokens"]
        assert len(g) == rec["n_cls_out"]
        np.testing.assert_allclose(g, e["scores"], atol=TOLERANCE[fam], rtol=0)
    if fam == "qwen3":
        assert abs(sum(got[0]) - 1.0) < 1e-5


def test_batching_does_not_change_scores():
    # n_batch small enough that the five prompts take several decodes, one sequence each at most
    rec = RECORD["families"]["xlmr"]
    longest = max(len(p["tokens"]) for p in rec["pairs"])
    llm = open_reranker("xlmr", n_batch=longest, n_ubatch=longest)
    try:
        got = {r["index"]: r["relevance_score"] for r in llm.rerank(QUERY, DOCS)}
    finally:
        llm.close()
    for pair in rec["pairs"]:
        assert abs(got[pair["index"]] - pair["scores"][0]) < TOLERANCE["xlmr"]


def test_top_n_and_return_documents(rerankers):
    llm = rerankers["xlmr"]
    order = RECORD["families"]["xlmr"]["order"]
    top = llm.rerank(QUERY, DOCS, top_n=2, return_documents=True)
    assert [r["index"] for r in top] == order[:2]
    assert [r["document"] for r in top] == [{"text": DOCS[i]} for i in order[:2]]
    assert llm.rerank(QUERY, DOCS, top_n=0) == []
    assert len(llm.rerank(QUERY, DOCS, top_n=50)) == len(DOCS)
    # the same document twice: equal scores, kept in the documents' order
    twice = llm.rerank(QUERY, [DOCS[1], DOCS[1]])
    assert twice[0]["relevance_score"] == twice[1]["relevance_score"]
    assert [r["index"] for r in twice] == [0, 1]


def test_engine_pools_rank_per_sequence(rerankers):
    # two prompts in one decode, as sequences 0 and 1: each its own scores
    rec = RECORD["families"]["bert"]
    ctx = E.Context(E.Model(path_of("bert")), n_ctx=256, n_threads=2, embeddings=True, n_seq_max=4, pooling_type=4)
    a, b = rec["pairs"][0]["tokens"], rec["pairs"][3]["tokens"]
    ctx.decode(tokens=a + b, pos=list(range(len(a))) + list(range(len(b))), seq_ids=[0] * len(a) + [1] * len(b))
    got = np.array(ctx.get_embeddings_seqs(2))
    assert got.shape == (2, 1)
    assert abs(got[0, 0] - rec["pairs"][0]["scores"][0]) < TOLERANCE["bert"]
    assert abs(got[1, 0] - rec["pairs"][3]["scores"][0]) < TOLERANCE["bert"]


def test_a_model_without_classifier_head_is_refused():
    with pytest.raises(ValueError, match="classifier head"):
        Llama(NON_RERANKER, embedding=True, pooling_type=LLAMA_POOLING_TYPE_RANK, n_ctx=64, verbose=False)
    llm = Llama(NON_RERANKER, embedding=True, n_ctx=64, verbose=False)
    try:
        with pytest.raises(ValueError, match="not a reranker"):
            llm.rerank("q", ["d"])
    finally:
        llm.close()


def test_a_reranker_needs_rank_pooling():
    llm = Llama(path_of("xlmr"), n_ctx=64, verbose=False)  # no embedding=True
    try:
        with pytest.raises(ValueError, match="pooling_type"):
            llm.rerank("q", ["d"])
    finally:
        llm.close()
    llm = Llama(path_of("xlmr"), embedding=True, pooling_type=2, n_ctx=64, verbose=False)
    try:
        with pytest.raises(ValueError, match="LLAMA_POOLING_TYPE_RANK"):
            llm.rerank("q", ["d"])
    finally:
        llm.close()


@pytest.mark.parametrize("args, exc, fragment", [
    (("q", []), ValueError, "empty"),
    (("q", "a document"), TypeError, "list of str"),
    (("q", ["a", 3]), TypeError, r"documents\[1\]"),
    ((3, ["a"]), TypeError, "query"),
])
def test_bad_input(rerankers, args, exc, fragment):
    with pytest.raises(exc, match=fragment):
        rerankers["xlmr"].rerank(*args)


@pytest.mark.parametrize("top_n", [-1, 1.5, True])
def test_bad_top_n(rerankers, top_n):
    with pytest.raises(ValueError, match="top_n"):
        rerankers["xlmr"].rerank("q", ["d"], top_n=top_n)


def test_too_long_prompt_is_a_clear_error(rerankers):
    # the XLM-RoBERTa fixture has 64 learned positions
    with pytest.raises(ValueError, match=r"document 1.*positions"):
        rerankers["xlmr"].rerank(QUERY, ["short", "the quick brown fox " * 20])
    assert len(rerankers["xlmr"].rerank(QUERY, DOCS)) == len(DOCS)  # still usable


# ---------------------------------------------------------------------------
# The server's /v1/rerank
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server():
    needs("fastapi")
    needs("uvicorn")
    from server_helpers import LiveServer

    s = LiveServer(["-m", path_of("xlmr"), "--reranking", "-c", "512", "-t", "2"]).start()
    yield s
    s.stop()


@pytest.fixture
def client(server):
    httpx = needs("httpx")
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v1/reranking", "/reranking"])
def test_rerank_route(client, path):
    rec = RECORD["families"]["xlmr"]
    r = client.post(path, json={"model": "my-reranker", "query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["model"] == "my-reranker" and out["object"] == "list"
    n_tokens = sum(len(p["tokens"]) for p in rec["pairs"])
    assert out["usage"] == {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
    assert [x["index"] for x in out["results"]] == rec["order"]
    for x in out["results"]:
        assert set(x) == {"index", "relevance_score"}
        assert abs(x["relevance_score"] - rec["pairs"][x["index"]]["scores"][0]) < TOLERANCE["xlmr"]


def test_rerank_route_top_n_and_documents(client):
    order = RECORD["families"]["xlmr"]["order"]
    docs = [DOCS[0], {"text": DOCS[1]}, DOCS[2], DOCS[3], DOCS[4]]  # Cohere's document objects too
    r = client.post("/v1/rerank", json={"query": QUERY, "documents": docs, "top_n": 3, "return_documents": True})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["index"] for x in res] == order[:3]
    assert [x["document"] for x in res] == [{"text": DOCS[i]} for i in order[:3]]


def test_rerank_route_tei_form(client):
    """Text Embeddings Inference's request (texts, return_text) gets its bare list back."""
    rec = RECORD["families"]["xlmr"]
    r = client.post("/rerank", json={"query": QUERY, "texts": DOCS, "return_text": True, "raw_scores": False})
    assert r.status_code == 200, r.text
    out = r.json()
    assert [x["index"] for x in out] == rec["order"]
    for x in out:
        assert set(x) == {"index", "score", "text"} and x["text"] == DOCS[x["index"]]
        assert abs(x["score"] - rec["pairs"][x["index"]]["scores"][0]) < TOLERANCE["xlmr"]
    r = client.post("/rerank", json={"query": QUERY, "texts": DOCS, "top_n": 2})
    assert [set(x) for x in r.json()] == [{"index", "score"}] * 2


@pytest.mark.parametrize("body, fragment", [
    ({"query": "q", "texts": []}, "texts"),
    ({"query": "q", "texts": ["a"], "documents": ["a"]}, "texts"),
    ({"query": "q", "texts": ["a"], "truncate": True}, "truncate"),
    ({"documents": ["a"]}, "query"),
    ({"query": "q", "documents": []}, "documents"),
    ({"query": "q", "documents": ["a", 3]}, "documents"),
    ({"query": "q", "documents": [{"title": "a"}]}, "documents[0]"),
    ({"query": "q", "documents": ["a"], "top_n": -1}, "top_n"),
    ({"query": "q", "documents": ["a"], "top_n": "2"}, "top_n"),
    ({"query": "q", "documents": ["a", "the quick brown fox " * 20]}, "documents[1]"),
])
def test_rerank_route_bad_requests(client, body, fragment):
    r = client.post("/v1/rerank", json=body)
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"]["message"]


def _live(argv):
    needs("fastapi")
    needs("uvicorn")
    from server_helpers import LiveServer

    return LiveServer(argv).start()


def test_rerank_route_needs_reranking_and_a_reranker():
    httpx = needs("httpx")
    body = {"query": "q", "documents": ["d"]}
    s = _live(["-m", path_of("xlmr"), "-c", "128", "-t", "2"])  # no --reranking
    try:
        r = httpx.post(s.url + "/v1/rerank", json=body, timeout=60)
        assert r.status_code == 501 and "--reranking" in r.json()["error"]["message"]
    finally:
        s.stop()
    s = _live(["-m", NON_RERANKER, "--embedding", "-c", "128", "-t", "2"])  # embeddings, no classifier head
    try:
        r = httpx.post(s.url + "/rerank", json=body, timeout=60)
        assert r.status_code == 501 and "not a reranker" in r.json()["error"]["message"]
    finally:
        s.stop()


def test_rerank_route_needs_the_api_key():
    httpx = needs("httpx")
    s = _live(["-m", path_of("bert"), "--reranking", "--api-key", "sekrit", "-c", "128", "-t", "2"])
    try:
        body = {"query": QUERY, "documents": DOCS[:2]}
        assert httpx.post(s.url + "/v1/rerank", json=body, timeout=60).status_code == 401
        r = httpx.post(s.url + "/v1/rerank", json=body, headers={"Authorization": "Bearer sekrit"}, timeout=60)
        assert r.status_code == 200, r.text
        assert len(r.json()["results"]) == 2
    finally:
        s.stop()


def test_reranking_flag_conflicts_with_other_pooling():
    from llamapy.server.config import ConfigError, parse_settings

    s = parse_settings(["-m", path_of("xlmr"), "--reranking"], environ={})
    assert s.embedding is True and s.pooling == "rank"
    with pytest.raises(ConfigError, match="--pooling mean"):
        parse_settings(["-m", path_of("xlmr"), "--reranking", "--pooling", "mean"], environ={})
