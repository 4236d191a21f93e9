"""llamapy._internals: llama-cpp-python's LlamaModel / LlamaContext /
LlamaBatch / LlamaSampler, driven as its own tests and users drive them, and
checked against what Llama computes on the same model."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import llamapy
from llamapy import Llama
from llamapy import _internals as internals

PROMPT = b"The quick brown fox jumps over the lazy dog. The quick brown fox"


def model_params(**fields):
    p = llamapy.llama_model_default_params()
    p.load_mode = llamapy.LLAMA_LOAD_MODE_MMAP
    p.n_gpu_layers = 0
    for k, v in fields.items():
        setattr(p, k, v)
    return p


def context_params(**fields):
    c = llamapy.llama_context_default_params()
    c.n_ctx, c.n_batch, c.n_ubatch, c.n_threads, c.n_threads_batch = 64, 32, 32, 2, 2
    c.flash_attn_type = llamapy.LLAMA_FLASH_ATTN_TYPE_ENABLED
    for k, v in fields.items():
        setattr(c, k, v)
    return c


@pytest.fixture(scope="module")
def gemma(gemma_path):
    model = internals.LlamaModel(path_model=gemma_path, params=model_params(), verbose=False)
    yield model
    model.close()


@pytest.fixture(scope="module")
def ref(gemma_path):
    return Llama(gemma_path, n_ctx=64, n_batch=32, n_threads=2, flash_attn=True, verbose=False)


def test_top_level_and_module_names():
    assert llamapy.internals is internals
    for name in ("LlamaModel", "LlamaContext", "LlamaBatch", "LlamaSampler", "normalize_embedding"):
        assert hasattr(internals, name)


def test_model_facts_and_vocabulary(gemma, ref):
    assert gemma.n_vocab() == ref.n_vocab() and gemma.n_embd() == ref.n_embd()
    assert gemma.n_ctx_train() == ref._model.n_ctx_train() and gemma.n_params() > 0 and gemma.size() > 0
    assert "gemma3" in gemma.desc() and gemma.vocab_type() == llamapy.LLAMA_VOCAB_TYPE_SPM
    assert gemma.rope_freq_scale_train() == 1.0
    assert gemma.token_bos() == ref.token_bos() and gemma.token_eos() == ref.token_eos()
    assert gemma.token_cls() == gemma.token_bos() and gemma.token_nl() == ref.token_nl()
    assert gemma.add_bos_token() and not gemma.add_eos_token()
    assert gemma.metadata() == ref.metadata
    tokens = gemma.tokenize(PROMPT, add_bos=True, special=True)
    assert tokens == ref.tokenize(PROMPT, add_bos=True, special=True)
    assert gemma.detokenize(tokens) == ref.detokenize(tokens) == PROMPT
    assert gemma.token_to_piece(tokens[1]) == ref.detokenize(tokens[1:2])
    # <start_of_turn>: control text, attribute CONTROL (llama.cpp's LLAMA_TOKEN_ATTR_CONTROL = 8)
    sot = gemma.tokenize(b"<start_of_turn>", add_bos=False, special=True)
    assert len(sot) == 1 and gemma.token_get_text(sot[0]) == "<start_of_turn>"
    assert gemma.token_get_attr(sot[0]) & 8
    assert isinstance(gemma.token_get_score(sot[0]), float)
    with pytest.raises(NotImplementedError):
        gemma.get_tensor("output.weight")


def _decode_prompt(gemma, logits_all=False):
    ctx = internals.LlamaContext(model=gemma, params=context_params(), verbose=False)
    tokens = gemma.tokenize(PROMPT, add_bos=True, special=True)
    batch = internals.LlamaBatch(n_tokens=len(tokens), embd=0, n_seq_max=1)
    batch.set_batch(tokens, n_past=0, logits_all=logits_all)
    assert batch.n_tokens() == len(tokens)
    ctx.decode(batch)
    return ctx, tokens


def test_decode_logits_equal_llama(gemma, ref):
    ctx, tokens = _decode_prompt(gemma)
    ref.reset()
    ref.eval(tokens)
    n_vocab = gemma.n_vocab()
    last = np.ctypeslib.as_array(ctx.get_logits_ith(-1), shape=(n_vocab,))
    np.testing.assert_array_equal(last, ref.scores[ref.n_tokens - 1])
    assert isinstance(ctx.get_logits(), ctypes.POINTER(ctypes.c_float))
    assert ctx.get_logits()[5] == last[5]  # indexable like llama.cpp's pointer
    np.testing.assert_array_equal(np.ctypeslib.as_array(ctx.get_logits_ith(len(tokens) - 1), shape=(n_vocab,)),
                                  last)
    with pytest.raises(ValueError, match="no output"):
        ctx.get_logits_ith(0)  # its logits flag was not set
    assert ctx.n_ctx() == 64


def test_logits_all_rows_and_continuation(gemma):
    ctx, tokens = _decode_prompt(gemma, logits_all=True)
    n_vocab = gemma.n_vocab()
    rows = np.ctypeslib.as_array(ctx.get_logits(), shape=(len(tokens), n_vocab)).copy()
    np.testing.assert_array_equal(np.ctypeslib.as_array(ctx.get_logits_ith(3), shape=(n_vocab,)), rows[3])
    # the next token, decoded after the prompt, equals a one-batch decode of prompt + token
    nxt = int(np.argmax(rows[-1]))
    step = internals.LlamaBatch(n_tokens=1, embd=0, n_seq_max=1)
    step.set_batch([nxt], n_past=len(tokens), logits_all=False)
    ctx.decode(step)
    one = np.ctypeslib.as_array(ctx.get_logits_ith(-1), shape=(n_vocab,)).copy()
    ctx.kv_cache_clear()
    whole = internals.LlamaBatch(n_tokens=len(tokens) + 1, embd=0, n_seq_max=1)
    whole.set_batch(tokens + [nxt], n_past=0, logits_all=False)
    ctx.decode(whole)
    both = np.ctypeslib.as_array(ctx.get_logits_ith(-1), shape=(n_vocab,))
    assert int(np.argmax(both)) == int(np.argmax(one))
    np.testing.assert_allclose(both, one, atol=0.05)


def test_sampler_chain_matches_llama_sample(gemma_path, gemma):
    ctx, tokens = _decode_prompt(gemma)
    seed = 1234
    llm = Llama(gemma_path, n_ctx=64, n_batch=32, n_threads=2, flash_attn=True, seed=seed, verbose=False)
    llm.eval(tokens)
    sampler = internals.LlamaSampler()
    sampler.add_top_k(50)
    sampler.add_top_p(0.9, 1)
    sampler.add_min_p(0.05, 1)
    sampler.add_temp(0.8)
    sampler.add_dist(seed)
    assert sampler.get_seed() == seed
    ours, theirs = [], []
    for _ in range(6):
        t = sampler.sample(ctx, -1)
        ours.append(t)
        b = internals.LlamaBatch(n_tokens=1, embd=0, n_seq_max=1)
        b.set_batch([t], n_past=len(tokens) + len(ours) - 1, logits_all=False)
        ctx.decode(b)
    for tok in llm.generate(tokens, top_k=50, top_p=0.9, min_p=0.05, temp=0.8, reset=True):
        theirs.append(tok)
        if len(theirs) == 6:
            break
    assert ours == theirs


def test_greedy_penalties_and_grammar(gemma):
    ctx, tokens = _decode_prompt(gemma)
    logits = np.ctypeslib.as_array(ctx.get_logits_ith(-1), shape=(gemma.n_vocab(),)).copy()
    greedy = internals.LlamaSampler()
    greedy.add_greedy()
    assert greedy.sample(ctx) == int(np.argmax(logits))
    banned = internals.LlamaSampler()
    banned.add_logit_bias(gemma.n_vocab(), {int(np.argmax(logits)): float("-inf")})
    banned.add_greedy()
    second = banned.sample(ctx)
    assert second != int(np.argmax(logits)) and second == int(np.argsort(logits)[-2])
    g = internals.LlamaSampler()
    g.add_grammar(gemma, llamapy.LlamaGrammar.from_string('root ::= "yes" | "no"', verbose=False))
    g.add_greedy()
    first = g.sample(ctx)
    assert gemma.detokenize([first]) in (b"yes", b"no", b"y", b"n", b"ye")
    clone = g.clone()  # at the same grammar position: both continue the same word
    assert clone.get_seed() == g.get_seed() == llamapy.LLAMA_DEFAULT_SEED
    second = g.sample(ctx)
    assert clone.sample(ctx) == second
    assert (gemma.detokenize([first, second]) in (b"yes", b"no")
            or b"yes".startswith(gemma.detokenize([first, second])))
    g.close()
    assert g.sampler is None and clone.sampler is clone
    with pytest.raises(ValueError, match="closed"):
        g.sample(ctx)


def test_sampler_refuses_what_it_cannot_run(gemma):
    s = internals.LlamaSampler()
    s.add_temp(0.7)
    with pytest.raises(NotImplementedError, match="order"):
        s.add_top_k(40)  # llamapy's chain truncates before the temperature
    for add in (lambda x: x.add_xtc(0.1, 0.1, 1, 0), lambda x: x.add_top_n_sigma(1.0),
                lambda x: x.add_temp_ext(0.8, 0.1, 1.0), lambda x: x.add_infill(gemma),
                lambda x: x.add_dry(gemma, 0.8, 1.75, 2, -1, ["\n"]), lambda x: x.add_custom(print)):
        with pytest.raises(NotImplementedError):
            add(internals.LlamaSampler())
    empty = internals.LlamaSampler()
    empty.add_top_k(10)
    ctx, _ = _decode_prompt(gemma)
    with pytest.raises(ValueError, match="selects no token"):
        empty.sample(ctx)
    with pytest.raises(NotImplementedError, match="deprecated"):
        ctx.sample_token_greedy(None)


def test_decode_errors_are_runtime_errors(gemma):
    ctx = internals.LlamaContext(model=gemma, params=context_params(n_batch=4, n_ubatch=4), verbose=False)
    batch = internals.LlamaBatch(n_tokens=8, embd=0, n_seq_max=1)
    batch.set_batch(list(range(2, 10)), n_past=0, logits_all=False)
    with pytest.raises(RuntimeError, match="n_batch"):
        ctx.decode(batch)
    with pytest.raises(ValueError, match="do not fit"):
        batch.set_batch(list(range(9)), n_past=0, logits_all=False)


def test_sequences_and_embeddings(gemma_path):
    model = internals.LlamaModel(path_model=gemma_path, params=model_params(), verbose=False)
    ctx = internals.LlamaContext(model=model, params=context_params(embeddings=True, n_seq_max=2,
                                                                    pooling_type=llamapy.LLAMA_POOLING_TYPE_MEAN),
                                 verbose=False)
    assert ctx.pooling_type() == llamapy.LLAMA_POOLING_TYPE_MEAN
    texts = [b"Hello world", b"A different prompt"]
    toks = [model.tokenize(t, add_bos=True, special=True) for t in texts]
    batch = internals.LlamaBatch(n_tokens=sum(map(len, toks)), embd=0, n_seq_max=1)
    for i, t in enumerate(toks):
        batch.add_sequence(t, seq_id=i, logits_all=False)
    ctx.decode(batch)
    n_embd = model.n_embd()
    got = [np.ctypeslib.as_array(ctx.get_embeddings_seq(i), shape=(n_embd,)).copy() for i in range(2)]
    # flash attention as in context_params (on Gemma flash and explicit attention differ by up to ~1.0
    # in the outputs, as they do in llama.cpp: flash accumulates in F16)
    llm = Llama(gemma_path, embedding=True, pooling_type=llamapy.LLAMA_POOLING_TYPE_MEAN, n_ctx=64, n_threads=2,
                flash_attn=True, verbose=False)
    for t, g in zip(texts, got):
        np.testing.assert_allclose(g, llm.embed(t.decode()), rtol=1e-4, atol=1e-4)
    assert internals.normalize_embedding([3.0, 4.0]) == [0.6, 0.8]
    # closing the model closes its contexts first, as llama.cpp requires
    model.close()
    assert ctx.ctx is None and model.model is None
    with pytest.raises(ValueError, match="closed"):
        model.n_vocab()


def test_vocab_only_has_a_context_that_cannot_evaluate(gemma_path):
    llm = Llama(gemma_path, vocab_only=True, verbose=False)
    assert llm._ctx is not None and llm._ctx.ctx is not None  # llama-cpp-python's tokenization test reads it
    assert llm._ctx.n_ctx == llm.n_ctx()
    with pytest.raises(AttributeError, match="vocab_only"):
        llm._ctx.decode
    assert llm.tokenize(b"Hello") == llm.tokenizer_.tokenize(b"Hello", True, False)
    with pytest.raises(ValueError, match="vocab_only"):
        llm.eval([2, 3])
    model = internals.LlamaModel(path_model=gemma_path, params=model_params(vocab_only=True), verbose=False)
    ctx = internals.LlamaContext(model=model, params=context_params(), verbose=False)
    assert ctx.n_ctx() == 64
    batch = internals.LlamaBatch(n_tokens=2, embd=0, n_seq_max=1)
    batch.set_batch([2, 3], n_past=0, logits_all=False)
    with pytest.raises(AttributeError, match="vocab_only"):
        ctx.decode(batch)


def test_llama_model_is_an_internals_model(ref):
    """Llama._model is llama-cpp-python's LlamaModel: code reads the special tokens'
    texts through it (for Jinja2ChatFormatter's bos_token / eos_token)."""
    m = ref._model
    assert isinstance(m, internals.LlamaModel) and ref.model is m.model
    assert m.token_eos() == ref.token_eos() and m.token_bos() == ref.token_bos()
    assert m.token_get_text(ref.token_bos()) == "<bos>" and m.token_get_text(ref.token_eos()) == "<eos>"
    assert m.n_vocab() == ref.n_vocab() and m.n_embd() == ref.n_embd()
    assert m.arch == "gemma3" and m.n_layer == 18  # the engine Model's attributes read through
    assert m.metadata()["general.architecture"] == "gemma3"
    with pytest.raises(AttributeError):
        m.no_such_attribute


def test_llama_flags_of_llama_cpp_python(ref):
    # llama-cpp-python's prompt-cache code branches on these (state-space and hybrid models).
    assert ref._is_recurrent is False and ref._is_hybrid is False


def test_bad_input(gemma_path, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        internals.LlamaModel(path_model=str(tmp_path / "missing.gguf"), params=model_params())
    with pytest.raises(ValueError):
        internals.LlamaBatch(n_tokens=0, embd=0, n_seq_max=1)
    with pytest.raises(NotImplementedError, match="embd"):
        internals.LlamaBatch(n_tokens=4, embd=16, n_seq_max=1)
