"""Data-parallel encoding (llamapy/_embedding_workers.py): an encoder's packed batches run
side by side on single-thread contexts, with the bits the Llama's own context gives."""
from __future__ import annotations

import numpy as np
import pytest

import minilm_ref as M
from llamapy import Llama, LLAMA_POOLING_TYPE_RANK
from llamapy import _embedding
from llamapy._embedding_workers import EncoderWorkers, parallel_workers, workers_for
from test_rerank import path_of

# Small batches, so that a few dozen inputs make many of them.
N_BATCH = 64


def texts(n: int = 48) -> list[str]:
    ref = M.reference()
    return [f"{ref['sentences'][i % len(ref['sentences'])]} (item {i})" for i in range(n)] + ["", "a", "word " * 70]


def open_minilm(outtype: str, n_threads: int, **kw) -> Llama:
    return Llama(M.gguf_path(outtype), embedding=True, verbose=False, n_threads=n_threads, n_batch=N_BATCH,
                 n_ubatch=N_BATCH, **kw)


@pytest.mark.parametrize("outtype", ["f32", "q8_0"])
def test_batches_side_by_side_give_the_one_thread_bits(outtype):
    inputs = texts()
    two, one = open_minilm(outtype, 2), open_minilm(outtype, 1)
    try:
        got = np.array(two.embed(inputs))
        workers = two.__dict__.get("_encoder_workers")
        assert isinstance(workers, EncoderWorkers) and workers.n == 2
        assert [c.n_threads for c in workers.contexts] == [1, 1]
        assert "_encoder_workers" not in one.__dict__  # one thread: the Llama's own context
        want = np.array(one.embed(inputs))
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(_embedding.embed_array(two, inputs, normalize=True),
                                      np.array(one.embed(inputs, normalize=True), dtype=np.float32))
        # the workers are kept and reused; the Llama's context is left empty and usable
        two.embed(inputs[:10])
        assert two.__dict__["_encoder_workers"] is workers
        np.testing.assert_array_equal(np.array(two.embed(inputs[3])), want[3])
        two.close()
        assert "_encoder_workers" not in two.__dict__  # closing frees them with the context
    finally:
        two.close()
        one.close()


def test_pooling_none_gives_every_tokens_vector_as_one_thread():
    inputs = texts(20)
    two, one = open_minilm("f32", 2, pooling_type=0), open_minilm("f32", 1, pooling_type=0)
    try:
        got, want = two.embed(inputs), one.embed(inputs)
        assert "_encoder_workers" in two.__dict__
        assert [len(g) for g in got] == [len(w) for w in want]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.array(g), np.array(w))
    finally:
        two.close()
        one.close()


def test_rerank_scores_side_by_side_equal_one_thread():
    longest = 24  # a few prompts per batch: several batches for the workers
    docs = [f"document number {i} about {'cats' if i % 3 else 'the weather'}" for i in range(30)]
    llms = [Llama(path_of("bert"), embedding=True, pooling_type=LLAMA_POOLING_TYPE_RANK, verbose=False, n_ctx=512,
                  n_threads=n, n_batch=longest * 3, n_ubatch=longest * 3) for n in (2, 1)]
    try:
        got, want = (llm.rerank("what is the weather like", docs) for llm in llms)
        assert "_encoder_workers" in llms[0].__dict__
        assert got == want
    finally:
        for llm in llms:
            llm.close()


def test_batches_are_repacked_to_keep_every_worker_busy():
    llm = open_minilm("f32", 2)
    try:
        ctx = llm._ctx
        token_lists = [llm.tokenize(t.encode())[:N_BATCH] for t in texts(30)]
        plain = _embedding._pack(token_lists, N_BATCH, int(ctx.n_seq_max))
        batches = _embedding._batches(llm, ctx, token_lists, parallel_workers(llm, ctx))
        assert len(batches) % 2 == 0 and len(batches) >= len(plain)
        assert sorted(i for b in batches for i in b) == list(range(len(token_lists)))
        assert all(sum(len(token_lists[i]) for i in b) <= N_BATCH for b in batches)
        # a single input stays one batch, on the Llama's own context
        assert _embedding._batches(llm, ctx, token_lists[:1], 2) == [[0]]
        assert workers_for(llm, ctx, 2, 1) is None
    finally:
        llm.close()


def test_an_error_in_one_batch_is_raised_and_the_contexts_are_left_empty():
    llm = open_minilm("f32", 2)
    try:
        inputs = texts(30)
        want = np.array(llm.embed(inputs))
        workers = llm.__dict__["_encoder_workers"]
        token_lists = [llm.tokenize(t.encode()) for t in inputs]
        batches = _embedding._batches(llm, llm._ctx, token_lists, 2)

        def step(ctx, members):
            if members is batches[1]:
                raise ValueError("batch 1 is bad")
            return _embedding._decode_pooled(ctx, token_lists, members, False)

        with pytest.raises(ValueError, match="batch 1 is bad"):
            workers.run(batches, step)
        assert all(c.kv_n_used == 0 for c in workers.contexts)
        np.testing.assert_array_equal(np.array(llm.embed(inputs)), want)
    finally:
        llm.close()


def test_decoders_and_gpu_placements_run_on_the_llamas_context(gemma_path):
    llm = Llama(gemma_path, embedding=True, verbose=False, n_threads=2, n_ctx=256)
    try:
        assert parallel_workers(llm, llm._ctx) == 0  # a decoder: its contexts hold a KV cache each
    finally:
        llm.close()

    class Placed:  # a context with a layer on a GPU
        def placement(self):
            return [{"device": "cpu"}, {"device": "vulkan0"}]

    enc = open_minilm("f32", 2)
    try:
        assert parallel_workers(enc, enc._ctx) == 2
        assert parallel_workers(enc, Placed()) == 0
    finally:
        enc.close()
    single = open_minilm("f32", 2, n_threads_batch=1)
    try:
        assert parallel_workers(single, single._ctx) == 0
    finally:
        single.close()


def test_no_memory_for_the_workers_runs_the_batches_one_by_one(monkeypatch, caplog):
    import llamapy._embedding_workers as W

    def refuse(*args, **kw):
        raise MemoryError("no room")

    monkeypatch.setattr(W, "EncoderWorkers", refuse)
    two, one = open_minilm("f32", 2), open_minilm("f32", 1)
    try:
        with caplog.at_level("WARNING", logger="llamapy"):
            got = np.array(two.embed(texts(20)))
        assert "no memory for 2 encoder contexts" in caplog.text
        assert "_encoder_workers" not in two.__dict__
        np.testing.assert_array_equal(got, np.array(one.embed(texts(20))))
    finally:
        two.close()
        one.close()


def test_a_context_with_hooks_keeps_its_batches():
    """A tensor callback (llamapy.debug) or imatrix collection is the Llama's context's own: the
    workers would run without it, so the batches stay on that context, and the hook sees them."""
    from llamapy.debug import set_tensor_callback

    llm = open_minilm("f32", 2)
    try:
        assert llm._ctx.hooks == [] and parallel_workers(llm, llm._ctx) == 2
        seen = []
        set_tensor_callback(llm, lambda name, arr: seen.append(name))
        assert llm._ctx.hooks == ["tensor_callback"] and parallel_workers(llm, llm._ctx) == 0
        want = np.array(open_minilm("f32", 1).embed(texts(30)))
        np.testing.assert_array_equal(np.array(llm.embed(texts(30))), want)
        assert "_encoder_workers" not in llm.__dict__ and len(seen) > 0
        set_tensor_callback(llm, None)
        assert llm._ctx.hooks == []
        llm._ctx.set_imatrix(True)
        assert llm._ctx.hooks == ["imatrix"] and parallel_workers(llm, llm._ctx) == 0
        llm._ctx.set_imatrix(False)
    finally:
        llm.close()
