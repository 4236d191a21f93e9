"""Per-sequence generation state (llamapy/_sequence.py): sequences of one context
decoded together in batched steps (the server's batch step, llamapy/server/batch.py)
give the same greedy tokens and the same log-probabilities as each run alone.

Exact on the explicit attention path, with F16 and F32 KV caches: a row's result
does not depend on the other rows of its batch or where its cells sit. (The flash
path's result depends on the cells' placement across its tiles, rounding that Gemma
amplifies; these tests pin flash_attn=False.)
"""
from __future__ import annotations

import threading

import pytest

from llamapy import Llama
from llamapy._sequence import Sequence
from llamapy.server.batch import BatchDecoder, Stepper

F32, F16 = 0, 1  # GGML type ids for type_k / type_v


def run_batched(llm, prompts, **kw):
    """Each prompt's completion on its own sequence, all sequences decoded in shared steps."""
    ctx = llm.ctx
    ctx.kv_clear()
    busy = set()
    stepper = Stepper(ctx, llm.n_batch, busy=lambda: sorted(busy), check=lambda i: None,
                      make_room=lambda n, free: None, on_full=lambda i, m: None)
    decoder = BatchDecoder(stepper)
    stepper.start()
    views = [llm.sequence_view(Sequence(ctx, i, llm.n_ctx(), llm.n_batch, llm.n_vocab(), 1, decoder=decoder))
             for i in range(len(prompts))]
    out = [None] * len(prompts)

    def run(i):
        busy.add(i)
        try:
            out[i] = views[i].create_completion(prompts[i], **kw)["choices"][0]
        finally:
            busy.discard(i)
            stepper.wake()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    stepper.stop(RuntimeError("stopped"))
    for v in views:
        v.close()
    return out, stepper


def check_equal_alone(llm, prompts, n_tokens):
    kw = dict(max_tokens=n_tokens, temperature=0.0, logprobs=1)
    alone = [llm.create_completion(p, **kw)["choices"][0] for p in prompts]
    batched, stepper = run_batched(llm, prompts, **kw)
    for a, b in zip(alone, batched):
        assert b["text"] == a["text"]
        assert b["logprobs"]["tokens"] == a["logprobs"]["tokens"]
        assert b["logprobs"]["token_logprobs"] == a["logprobs"]["token_logprobs"]  # exactly
    assert stepper.steps < stepper.rows_decoded  # several sequences per decode


@pytest.mark.parametrize("kv", [F16, F32], ids=["f16", "f32"])
@pytest.mark.parametrize("n_seq", [2, 4])
def test_batched_sequences_equal_alone_tiny(tiny, kv, n_seq):
    path = str(tiny("llama")[0])
    llm = Llama(path, n_ctx=512, n_batch=16, n_seq_max=4, flash_attn=False, type_k=kv, type_v=kv, verbose=False)
    prompts = [[1] + [5 + (7 * i + k) % 90 for k in range(3 + 9 * i)] for i in range(n_seq)]
    check_equal_alone(llm, prompts, 12)
    llm.close()


@pytest.mark.model
@pytest.mark.parametrize("kv", [F16, F32], ids=["f16", "f32"])
def test_batched_sequences_equal_alone_gemma(gemma_path, kv):
    llm = Llama(gemma_path, n_ctx=1024, n_batch=64, n_seq_max=4, n_threads=2, flash_attn=False, type_k=kv,
                type_v=kv, verbose=False)
    prompts = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a land far away,",
               "1, 2, 3, 4,"]
    check_equal_alone(llm, prompts, 16)
    llm.close()


def test_sequence_view_shares_the_model_not_the_state(tiny):
    llm = Llama(str(tiny("llama")[0]), n_ctx=128, n_seq_max=2, flash_attn=False, verbose=False)
    llm.eval([1, 5, 6, 7])
    view = llm.sequence_view(Sequence(llm.ctx, 1, 64, llm.n_batch, llm.n_vocab(), 1))
    assert view.n_tokens == 0 and view.n_ctx() == 64 and view.model is llm.model
    view.eval([1, 5, 6, 7])
    assert view.sequence.seq_id == 1 and list(view.eval_tokens) == list(llm.eval_tokens)
    assert (view.scores[3] == llm.scores[3]).all()
    with pytest.raises(ValueError, match="exceed context window of 64"):
        view.eval([5] * 61)
    with pytest.raises(NotImplementedError, match="save_state of a sequence_view"):
        view.save_state()
    view.close()  # frees nothing shared
    assert llm.create_completion([1, 5], max_tokens=2, temperature=0)["usage"]["completion_tokens"] == 2
    with pytest.raises(ValueError, match="outside this context's n_seq_max=2"):
        llm.sequence_view(Sequence(llm.ctx, 2, 64, llm.n_batch, llm.n_vocab(), 1))
    with pytest.raises(ValueError, match="n_seq_max must be a positive int"):
        Llama(str(tiny("llama")[0]), n_seq_max=0, verbose=False)
    llm.close()
