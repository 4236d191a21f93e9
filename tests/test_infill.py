"""Fill-in-the-middle: create_completion(prompt, suffix=...) with the model's
FIM tokens (prefix/suffix/middle order, or suffix first with spm_infill),
the suffix appended to the text for a model without them (llama-cpp-python's
fallback), and the server's /infill (llama-server's request and reply, extra
files with the file separator, 400 without FIM tokens or when it does not
fit). The model is the tiny qwen3moe fixture (a real byte-level BPE
vocabulary); five of its ordinary tokens are given the FIM roles through
kv_overrides, as a GGUF's tokenizer.ggml.fim_*_token_id keys would."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import needs

from llamapy import Llama
from llamapy._infill import tokenize_inner

MODEL = str(Path(__file__).parent / "data" / "moe" / "qwen3moe" / "qwen3moe-q8_0.gguf")
MIXTRAL = str(Path(__file__).parent / "data" / "moe" / "mixtral" / "mixtral-q8_0.gguf")
PRE, SUF, MID, SEP, REP = 315, 316, 317, 318, 319
FIM = {"tokenizer.ggml.fim_pre_token_id": PRE, "tokenizer.ggml.fim_suf_token_id": SUF,
       "tokenizer.ggml.fim_mid_token_id": MID}
REPO = {**FIM, "tokenizer.ggml.fim_sep_token_id": SEP, "tokenizer.ggml.fim_rep_token_id": REP}
PREFIX, SUFFIX = "def add(a, b):\n    ", "\n    return c\n"


def _llama(overrides=None, **kw):
    return Llama(model_path=MODEL, n_ctx=256, verbose=False, kv_overrides=overrides, **kw)


def _plain(llm, text):
    return llm.tokenize(text.encode(), add_bos=False, special=False)


@pytest.fixture(scope="module")
def fim_llm():
    llm = _llama(FIM)
    yield llm
    llm.close()


def test_prefix_suffix_middle_layout(fim_llm):
    r = fim_llm.create_completion(PREFIX, suffix=SUFFIX, max_tokens=4, temperature=0)
    expect = [PRE] + _plain(fim_llm, PREFIX) + [SUF] + tokenize_inner(fim_llm.tokenizer_, SUFFIX) + [MID]
    assert list(fim_llm.eval_tokens)[:len(expect)] == expect  # the BPE vocabulary adds no BOS
    assert r["usage"]["prompt_tokens"] == len(expect)
    # the text is the middle alone, the same as completing the laid-out tokens directly
    direct = fim_llm.create_completion(expect, max_tokens=4, temperature=0)
    assert r["choices"][0]["text"] == direct["choices"][0]["text"]
    assert not r["choices"][0]["text"].endswith(SUFFIX)


def test_streamed_middle_is_the_whole_one(fim_llm):
    whole = fim_llm.create_completion(PREFIX, suffix=SUFFIX, max_tokens=4, temperature=0)["choices"][0]["text"]
    parts = [c["choices"][0]["text"] for c in
             fim_llm.create_completion(PREFIX, suffix=SUFFIX, max_tokens=4, temperature=0, stream=True)]
    assert "".join(parts) == whole


def test_suffix_first_with_spm_infill():
    llm = _llama(FIM, spm_infill=True)
    try:
        llm.create_completion(PREFIX, suffix=SUFFIX, max_tokens=1, temperature=0)
        expect = [SUF] + tokenize_inner(llm.tokenizer_, SUFFIX) + [PRE] + _plain(llm, PREFIX) + [MID]
        assert list(llm.eval_tokens)[:len(expect)] == expect
    finally:
        llm.close()


def test_token_prompt_is_the_prefix(fim_llm):
    ids = _plain(fim_llm, PREFIX)
    fim_llm.create_completion(ids, suffix=SUFFIX, max_tokens=1, temperature=0)
    assert list(fim_llm.eval_tokens)[:len(ids) + 1] == [PRE] + ids


def test_without_fim_tokens_the_suffix_is_appended():
    llm = _llama()
    try:
        r = llm.create_completion(PREFIX, suffix=SUFFIX, max_tokens=3, temperature=0)
        assert r["choices"][0]["text"].endswith(SUFFIX)
        assert SUF not in llm.eval_tokens and PRE not in llm.eval_tokens
        streamed = "".join(c["choices"][0]["text"] for c in
                           llm.create_completion(PREFIX, suffix=SUFFIX, max_tokens=3, temperature=0, stream=True))
        assert streamed == r["choices"][0]["text"]
    finally:
        llm.close()


def test_inner_text_has_no_added_leading_space():
    # A SentencePiece vocabulary adds a space before an input's first word; the
    # suffix continues the middle, so it must not get one.
    from llamapy import _engine
    from llamapy._tokenizer import LlamaTokenizer

    tok = LlamaTokenizer(_engine.Vocab.from_file(MIXTRAL))
    plain = tok.tokenize(b"world", add_bos=False, special=False)
    inner = tokenize_inner(tok, "world")
    assert tok.detokenize(plain) == b" world"  # the added space
    assert tok.detokenize(inner) == b"world"
    assert tokenize_inner(tok, "") == []


# ---------------------------------------------------------------------------
# The server's /infill
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server():
    needs("fastapi")
    needs("uvicorn")
    from server_helpers import LiveServer

    s = LiveServer(["-m", MODEL, "-c", "256", "-t", "2"], load=lambda: _llama(REPO)).start()
    yield s
    s.stop()


@pytest.fixture
def client(server):
    httpx = needs("httpx")
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def _infill_tokens(llm, body):
    """The layout /infill must produce, from the library's own pieces."""
    extra = [REP] + _plain(llm, "myproject\n")
    for ch in body.get("input_extra", []):
        extra += [SEP] + _plain(llm, ch.get("filename", "tmp") + "\n") + _plain(llm, ch["text"])
    extra += [SEP] + _plain(llm, "filename\n")
    return (extra + [PRE] + _plain(llm, body["input_prefix"]) + tokenize_inner(llm.tokenizer_, body.get("prompt", ""))
            + [SUF] + tokenize_inner(llm.tokenizer_, body["input_suffix"]) + [MID])


def test_infill_route(client, fim_llm):
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": "c =",
            "input_extra": [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}],
            "n_predict": 4, "temperature": 0}
    r = client.post("/infill", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["stop"] is True and out["stop_type"] in ("eos", "limit")
    expect = _infill_tokens(fim_llm, body)
    assert out["tokens_evaluated"] == len(expect)
    assert out["tokens_predicted"] <= 4
    llm = _llama(REPO)
    try:
        direct = llm.create_completion(expect, max_tokens=4, temperature=0)["choices"][0]["text"]
    finally:
        llm.close()
    assert out["content"] == direct
    # streamed: content pieces, then one closing event with stop true
    events = []
    with client.stream("POST", "/infill", json={**body, "stream": True}) as s:
        for line in s.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert events[-1]["stop"] is True and all(e["stop"] is False for e in events[:-1])
    assert "".join(e["content"] for e in events) == direct


@pytest.mark.parametrize("body, fragment", [
    ({"input_suffix": "x"}, "input_prefix"),
    ({"input_prefix": "x", "input_suffix": "y", "input_extra": [{"filename": "a"}]}, "input_extra[0]"),
    ({"input_prefix": "x", "input_suffix": "y", "input_extra": [{"text": "t", "filename": 3}]}, "filename"),
    ({"input_prefix": "x " * 400, "input_suffix": "y"}, "context"),
])
def test_infill_bad_requests(client, body, fragment):
    r = client.post("/infill", json=body)
    assert r.status_code in (400, 422), r.text
    assert fragment in r.text


def test_infill_needs_fim_tokens():
    needs("fastapi")
    needs("uvicorn")
    httpx = needs("httpx")
    from server_helpers import LiveServer

    s = LiveServer(["-m", MODEL, "-c", "256", "-t", "2"], load=lambda: _llama()).start()
    try:
        r = httpx.post(s.url + "/infill", json={"input_prefix": "a", "input_suffix": "b"}, timeout=60)
        assert r.status_code == 400
        assert "fill-in-the-middle" in r.json()["error"]["message"]
    finally:
        s.stop()
