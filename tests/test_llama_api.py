"""The llama-cpp-python-compatible ``Llama`` API on the real test model:
construction options, tokenization, completions (streaming, stop strings,
seeds, logprobs, echo), prefix reuse, state save/load, errors, threads."""
from __future__ import annotations

import logging
import threading

import numpy as np
import pytest

pytestmark = pytest.mark.model

PROMPT = "The largest planet in the solar system is"


@pytest.fixture(scope="module")
def model_path(gemma_path):
    return gemma_path


@pytest.fixture(scope="module")
def llm(model_path):
    from llamapy import Llama

    m = Llama(model_path=model_path, n_ctx=256, n_threads=2, verbose=False)
    yield m
    m.close()


def text_of(out):
    return out["choices"][0]["text"]


# ---------------------------------------------------------------- construction
def test_unknown_keyword_is_rejected(model_path):
    from llamapy import Llama

    with pytest.raises(TypeError, match="n_gpu_layer"):
        Llama(model_path=model_path, n_gpu_layer=1, verbose=False)


@pytest.mark.parametrize("kw, name", [({"rope_scaling_type": 3}, "rope_scaling_type")])
def test_unsupported_options_raise_naming_them(model_path, kw, name):
    from llamapy import Llama

    with pytest.raises(NotImplementedError, match=name):
        Llama(model_path=model_path, verbose=False, **kw)


def test_gpu_layers_are_not_silently_ignored(model_path, caplog):
    from llamapy import Llama
    from llamapy._params import gpu_unavailable

    with caplog.at_level(logging.INFO, logger="llamapy"):
        m = Llama(model_path=model_path, n_gpu_layers=-1, n_ctx=64, verbose=False)
    if gpu_unavailable() is None:  # a Vulkan build with a device: the layers went there, and it says so
        assert {p["device"] for p in m.device_map()[1:]} == {"gpu0"}
        assert any("offloaded" in r.getMessage() for r in caplog.records)
    else:  # one warning naming why, then the CPU
        assert any(r.levelno == logging.WARNING and "GPU" in r.getMessage() and "CPU" in r.getMessage()
                   for r in caplog.records)
        assert {p["device"] for p in m.device_map()} == {"cpu"}
    m.close()


def test_missing_file_and_bad_values(tmp_path):
    from llamapy import Llama

    with pytest.raises(ValueError, match="does not exist"):
        Llama(model_path=str(tmp_path / "nope.gguf"), verbose=False)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 20)
    from llamapy import GGUFError

    with pytest.raises(GGUFError):
        Llama(model_path=str(bad), verbose=False)
    with pytest.raises(ValueError):
        Llama(model_path=str(bad), n_batch=0, verbose=False)


def test_model_properties(llm):
    assert llm.n_ctx() == 256
    assert llm.n_vocab() == 262144
    assert llm.n_embd() == 640
    assert llm.token_bos() == 2 and llm.token_eos() == 1
    assert llm.metadata["general.architecture"] == "gemma3"
    assert llm.metadata["gemma3.block_count"] == "18"


def test_n_ctx_zero_uses_the_trained_length(model_path):
    from llamapy import Llama

    m = Llama(model_path=model_path, n_ctx=0, verbose=False)
    try:
        assert m.n_ctx() == 32768
    finally:
        m.close()


def test_vocab_only(model_path):
    from llamapy import Llama

    m = Llama(model_path=model_path, vocab_only=True, verbose=False)
    assert m.tokenize(b"Hi") == [2, 10979]
    with pytest.raises(ValueError, match="vocab_only"):
        m.eval([2])
    m.close()


# ---------------------------------------------------------------- tokenization
def test_tokenize_detokenize(llm):
    ids = llm.tokenize(b"Hello there, friend.")
    assert ids[0] == llm.token_bos()
    assert llm.detokenize(ids[1:]) == b"Hello there, friend."
    assert llm.tokenize(b"<start_of_turn>", add_bos=False, special=True) == [105]
    assert llm.tokenize(b"<start_of_turn>", add_bos=False, special=False) != [105]


# ----------------------------------------------------------------- completions
def test_greedy_completion_shape_and_usage(llm):
    out = llm(PROMPT, max_tokens=12, temperature=0.0)
    assert out["object"] == "text_completion" and out["id"].startswith("cmpl-")
    choice = out["choices"][0]
    assert choice["finish_reason"] == "length" and choice["index"] == 0 and choice["logprobs"] is None
    n_prompt = len(llm.tokenize(PROMPT.encode()))
    assert out["usage"] == {"prompt_tokens": n_prompt, "completion_tokens": 12, "total_tokens": n_prompt + 12}
    assert text_of(out).startswith(" the largest")
    assert text_of(llm(PROMPT, max_tokens=12, temperature=0.0)) == text_of(out)


def test_stream_equals_non_stream(llm):
    whole = llm(PROMPT, max_tokens=20, temperature=0.0)
    chunks = list(llm(PROMPT, max_tokens=20, temperature=0.0, stream=True))
    assert all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == text_of(whole)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["usage"] == whole["usage"]


def test_stop_strings_never_leak(llm):
    full = text_of(llm(PROMPT, max_tokens=24, temperature=0.0))
    stop = "solar"
    assert stop in full
    out = llm(PROMPT, max_tokens=24, temperature=0.0, stop=[stop, "zzz"])
    assert text_of(out) == full[: full.index(stop)]
    assert out["choices"][0]["finish_reason"] == "stop"
    pieces = [c["choices"][0]["text"] for c in llm(PROMPT, max_tokens=24, temperature=0.0, stop=stop, stream=True)]
    assert "".join(pieces) == full[: full.index(stop)]
    assert all(stop not in p and "sol" != p for p in pieces)


def test_seed_makes_sampling_reproducible(llm):
    a = text_of(llm(PROMPT, max_tokens=16, temperature=1.0, seed=1234))
    b = text_of(llm(PROMPT, max_tokens=16, temperature=1.0, seed=1234))
    outs = {text_of(llm(PROMPT, max_tokens=16, temperature=1.0, seed=s)) for s in range(5)}
    assert a == b
    assert len(outs) > 1


def test_logprobs_without_logits_all(llm):
    out = llm(PROMPT, max_tokens=5, temperature=0.0, logprobs=3)
    lp = out["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 5
    assert "".join(lp["tokens"]) == text_of(out)
    for tok, chosen, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert chosen <= 0.0 and tok in top
        assert max(top.values()) == pytest.approx(chosen, abs=1e-5)  # greedy picks the most likely
    offsets = lp["text_offset"]
    assert offsets == sorted(offsets) and offsets[0] == len(PROMPT)  # counted from the prompt's end
    text = PROMPT + text_of(out)
    assert all(text.startswith(tok, o) for tok, o in zip(lp["tokens"], offsets))


def test_logprobs_match_log_softmax(model_path):
    from llamapy import Llama

    m = Llama(model_path=model_path, n_ctx=128, logits_all=True, verbose=False)
    out = m(PROMPT, max_tokens=3, temperature=0.0, logprobs=2)
    n_prompt = out["usage"]["prompt_tokens"]
    scores = np.array(m.scores[n_prompt - 1], dtype=np.float64)
    ref = scores - scores.max() - np.log(np.exp(scores - scores.max()).sum())
    assert out["choices"][0]["logprobs"]["token_logprobs"][0] == pytest.approx(ref.max(), abs=1e-4)
    m.close()


def test_echo_and_echo_logprobs(llm):
    out = llm(PROMPT, max_tokens=4, temperature=0.0, echo=True)
    assert text_of(out).startswith(PROMPT)
    out = llm(PROMPT, max_tokens=4, temperature=0.0, echo=True, logprobs=1)
    lp = out["choices"][0]["logprobs"]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None  # OpenAI: first prompt token
    assert all(v is not None and v <= 0 for v in lp["token_logprobs"][1:])
    assert "".join(lp["tokens"]) == text_of(out)


def test_prompt_longer_than_context_raises(llm):
    with pytest.raises(ValueError, match="exceed context window"):
        llm("word " * 400, max_tokens=4)
    with pytest.raises(ValueError, match="exceed context window"):
        llm.create_completion("word " * 400, stream=True)


def test_max_tokens_none_runs_to_the_context(llm):
    out = llm("1, 2, 3,", max_tokens=None, temperature=0.0)
    assert out["usage"]["total_tokens"] <= llm.n_ctx()
    if out["choices"][0]["finish_reason"] == "length":
        assert out["usage"]["total_tokens"] == llm.n_ctx()


def test_token_prompt_and_bad_ids(llm):
    ids = llm.tokenize(PROMPT.encode())
    assert text_of(llm(ids, max_tokens=6, temperature=0.0)) == text_of(llm(PROMPT, max_tokens=6, temperature=0.0))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm([2, 10**7], max_tokens=2)


def test_logit_bias_logits_processor_and_stopping_criteria(llm):
    from llamapy import LogitsProcessorList, StoppingCriteriaList

    forced = llm.tokenize(b" banana", add_bos=False)[0]
    out = llm(PROMPT, max_tokens=3, temperature=0.0, logit_bias={forced: 100.0})
    assert text_of(out) == " banana" * 3

    seen = []

    def ban_top(input_ids, scores):
        seen.append(len(input_ids))
        scores[int(np.argmax(scores))] = -np.inf
        return scores

    base = text_of(llm(PROMPT, max_tokens=1, temperature=0.0))
    alt = text_of(llm(PROMPT, max_tokens=1, temperature=0.0, logits_processor=LogitsProcessorList([ban_top])))
    assert alt != base and seen

    out = llm(PROMPT, max_tokens=20, temperature=0.0,
              stopping_criteria=StoppingCriteriaList([lambda ids, logits: len(ids) >= 12]))
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"]["completion_tokens"] < 20


def test_multibyte_characters_are_never_split_in_a_stream(llm):
    # Force the byte-fallback tokens of an emoji one by one: a stream must only
    # show the whole character, never a replacement character.
    emoji = "😀".encode()
    queue = [llm.tokenizer().native.text_to_token(f"<0x{b:02X}>") for b in emoji]
    assert all(t >= 0 for t in queue)

    def force(input_ids, scores):
        out = np.full_like(scores, -np.inf)
        out[queue.pop(0) if queue else llm.token_eos()] = 0.0
        return out

    from llamapy import LogitsProcessorList

    chunks = [c["choices"][0]["text"] for c in
              llm(PROMPT, max_tokens=8, temperature=0.0, stream=True, logits_processor=LogitsProcessorList([force]))]
    assert "".join(chunks) == "😀"
    assert all("\ufffd" not in c for c in chunks)


# -------------------------------------------------------------- prefix / state
class CountingCtx:
    """Wraps the native context and counts the tokens decoded."""

    def __init__(self, ctx):
        self._ctx = ctx
        self.decoded = 0

    def decode(self, tokens=None, **kw):
        self.decoded += 0 if tokens is None else len(tokens)
        return self._ctx.decode(tokens=tokens, **kw)

    def __getattr__(self, name):
        return getattr(self._ctx, name)


def test_shared_prefix_is_not_evaluated_again(model_path):
    from llamapy import Llama

    m = Llama(model_path=model_path, n_ctx=256, verbose=False)
    counter = CountingCtx(m._ctx)
    m._ctx = counter
    first = m(PROMPT, max_tokens=4, temperature=0.0)
    n_prompt = first["usage"]["prompt_tokens"]
    assert counter.decoded == n_prompt + 3  # the last sampled token is never decoded
    counter.decoded = 0
    m(PROMPT + " Jupiter, which", max_tokens=1, temperature=0.0)
    extra = len(m.tokenize((PROMPT + " Jupiter, which").encode())) - n_prompt
    assert counter.decoded <= extra + 4  # only the new part (plus the tail the KV cache no longer matches)
    counter.decoded = 0
    m(PROMPT + " Jupiter, which", max_tokens=1, temperature=0.0)
    assert counter.decoded == 1  # identical prompt: only the last token, for its logits
    m._ctx = counter._ctx
    m.close()


def test_save_and_load_state_resume_identically(llm):
    llm.reset()
    llm.eval(llm.tokenize(PROMPT.encode()))
    state = llm.save_state()
    a = [t for _, t in zip(range(6), llm.generate([], temp=0.0, reset=False))]
    llm.load_state(state)
    assert llm.n_tokens == state.n_tokens
    b = [t for _, t in zip(range(6), llm.generate(state.input_ids.tolist(), temp=0.0))]
    assert a == b


def test_ram_cache_restores_a_previous_prompt(model_path):
    from llamapy import Llama, LlamaRAMCache

    m = Llama(model_path=model_path, n_ctx=256, verbose=False)
    m.set_cache(LlamaRAMCache(capacity_bytes=1 << 30))
    a = text_of(m(PROMPT, max_tokens=6, temperature=0.0))
    m("Something else entirely", max_tokens=2, temperature=0.0)
    assert len(m.cache.cache_state) == 2
    assert text_of(m(PROMPT, max_tokens=6, temperature=0.0)) == a
    m.close()


def test_disk_cache_survives_the_process_and_respects_capacity(model_path, tmp_path):
    from llamapy import Llama, LlamaDiskCache

    m = Llama(model_path=model_path, n_ctx=256, verbose=False)
    m.set_cache(LlamaDiskCache(cache_dir=str(tmp_path / "c")))
    a = text_of(m(PROMPT, max_tokens=6, temperature=0.0))
    m("Something else entirely", max_tokens=2, temperature=0.0)
    assert len(list((tmp_path / "c").glob("*.npz"))) == 2
    m.close()
    # a new process (here: a new cache object and model) finds the entries
    fresh = LlamaDiskCache(cache_dir=str(tmp_path / "c"))
    tokens = Llama(model_path=model_path, n_ctx=256, verbose=False).tokenize(PROMPT.encode())
    assert tokens in fresh
    state = fresh[tokens]
    assert state.n_tokens >= len(tokens)
    m2 = Llama(model_path=model_path, n_ctx=256, verbose=False)
    m2.set_cache(fresh)
    assert text_of(m2(PROMPT, max_tokens=6, temperature=0.0)) == a
    # capacity: one entry's worth keeps only the newest
    small = LlamaDiskCache(cache_dir=str(tmp_path / "s"), capacity_bytes=1)
    small[[1, 2, 3]] = state
    small[[4, 5, 6]] = state
    assert [4, 5, 6] in small and [1, 2, 3] not in small
    (tmp_path / "c" / "junk.llamastate.npz").write_bytes(b"not an npz")
    assert len(LlamaDiskCache(cache_dir=str(tmp_path / "c"))._keys) == 2  # damaged files are ignored
    m2.close()


# --------------------------------------------------------- threads / lifecycle
def test_concurrent_calls_do_not_crash(llm):
    results, errors = [], []

    def work(i):
        try:
            results.append(text_of(llm(PROMPT, max_tokens=6, temperature=0.0)))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(results)) == 1


def test_close_and_context_manager(model_path):
    from llamapy import Llama

    with Llama(model_path=model_path, n_ctx=64, verbose=False) as m:
        m.eval(m.tokenize(b"Hi"))
    with pytest.raises(ValueError, match="closed"):
        m.eval([2])
    m.close()  # twice is fine


def test_verbose_false_prints_nothing(model_path, capfd):
    from llamapy import Llama

    m = Llama(model_path=model_path, n_ctx=64, verbose=False)
    m("Hi", max_tokens=2)
    m.close()
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_bad_sampling_and_message_arguments(llm):
    with pytest.raises(ValueError, match="temperature"):
        llm(PROMPT, max_tokens=2, temperature=float("nan"))
    with pytest.raises(ValueError, match="top_p"):
        llm(PROMPT, max_tokens=2, top_p=float("inf"))
    with pytest.raises(ValueError, match="messages"):
        llm.create_chat_completion(messages="hi")
    with pytest.raises(ValueError, match="messages"):
        llm.create_chat_completion(messages=["hi"])


def test_duplicate_bos_warns_as_llama_cpp_python(llm):
    with pytest.warns(RuntimeWarning, match='duplicate leading "<bos>"') as rec:
        out = llm("<bos>" + PROMPT, max_tokens=1, temperature=0.0)
    assert rec[0].filename == __file__  # points at the caller
    assert out["usage"]["prompt_tokens"] == len(llm.tokenize(PROMPT.encode())) + 1
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        llm(PROMPT, max_tokens=1, temperature=0.0)


def test_legacy_keywords_of_older_llama_cpp_python_are_accepted(gemma_path, caplog):
    """LangChain's LlamaCpp passes n_parts and f16_kv (options of llama-cpp-python 0.1/0.2
    that 0.3.x ignores through **kwargs): accepted with a note, no effect; a typo stays an error."""
    import logging

    from llamapy import Llama

    with caplog.at_level(logging.INFO, logger="llamapy"):
        llm = Llama(gemma_path, n_ctx=64, n_parts=-1, f16_kv=True, device=None, seed=-1, verbose=False)
    assert any("n_parts" in r.getMessage() and "no effect" in r.getMessage() for r in caplog.records)
    assert llm.n_ctx() == 64
    with pytest.raises(TypeError, match="n_ctxx"):
        Llama(gemma_path, n_ctxx=64, verbose=False)
