"""Streams and generators of one Llama used across threads and alternately.

A stream holds no lock while suspended (so any thread may resume it), and a
generation that another user evaluated over in between restores its own rows:
each stream gives the text it gives alone (issue 31, items 9 and 10)."""
from __future__ import annotations

import concurrent.futures as cf

import pytest

from llamapy import Llama
from llamapy.llama_speculative import LlamaDraftModel

pytestmark = pytest.mark.model

PA = "The capital of France is"
PB = "Once upon a time, in a small village"


@pytest.fixture(scope="module")
def llm(gemma_path):
    m = Llama(model_path=gemma_path, n_ctx=512, n_threads=2, verbose=False)
    yield m
    m.close()


def text(chunks):
    return "".join(c["choices"][0]["text"] for c in chunks)


def stream(llm, prompt, n=16, **kw):
    return llm.create_completion(prompt, max_tokens=n, temperature=0, stream=True, **kw)


def test_stream_resumed_on_another_thread(llm):
    solo = text(stream(llm, PA))
    g = stream(llm, PA)
    a, b = cf.ThreadPoolExecutor(1), cf.ThreadPoolExecutor(1)
    try:
        got = [a.submit(next, g).result(timeout=60)]
        while True:
            pool = b if len(got) % 2 else a
            try:
                # The repro: this next() on a second thread blocked forever.
                got.append(pool.submit(next, g).result(timeout=60))
            except StopIteration:
                break
    finally:
        a.shutdown()
        b.shutdown()
    assert text(got) == solo


def test_two_streams_consumed_alternately_keep_their_text(llm):
    sa, sb = text(stream(llm, PA)), text(stream(llm, PB))
    assert sa != sb
    g1, g2 = stream(llm, PA), stream(llm, PB)
    ta, tb = [], []
    for c1, c2 in zip(g1, g2):
        ta.append(c1)
        tb.append(c2)
    ta.extend(g1)
    tb.extend(g2)
    assert text(ta) == sa
    assert text(tb) == sb


def test_a_call_between_steps_of_a_stream(llm):
    solo = text(stream(llm, PA))
    g = stream(llm, PA)
    first = [next(g), next(g)]
    other = llm.create_completion(PB, max_tokens=4, temperature=0)["choices"][0]["text"]
    assert other
    llm.reset()  # even a reset in between: the stream restores its rows
    assert text(first + list(g)) == solo


def test_generators_interleaved(llm):
    t1, t2 = llm.tokenize(PA.encode()), llm.tokenize(PB.encode())
    solo1 = [t for _, t in zip(range(10), llm.generate(t1, temp=0))]
    solo2 = [t for _, t in zip(range(10), llm.generate(t2, temp=0))]
    x, y = llm.generate(t1, temp=0), llm.generate(t2, temp=0)
    r1, r2 = [], []
    for _ in range(10):
        r1.append(next(x))
        r2.append(next(y))
    assert (r1, r2) == (solo1, solo2)


class _Echo(LlamaDraftModel):
    """Drafts the tokens a solo run produced next (right guesses), so that
    draft rows wait while the other stream evaluates."""

    def __init__(self, expected):
        self.expected = expected

    def __call__(self, input_ids, **kw):
        ids = list(input_ids)
        for start in range(len(ids)):
            if ids[start:] == self.expected[: len(ids) - start]:
                return self.expected[len(ids) - start: len(ids) - start + 4]
        return []


def test_draft_rows_waiting_while_another_call_evaluates(gemma_path):
    plain = Llama(model_path=gemma_path, n_ctx=512, n_threads=2, verbose=False)
    ta = plain.tokenize(PA.encode())
    solo = text(stream(plain, PA))
    full = ta + [t for _, t in zip(range(16), plain.generate(ta, temp=0))]
    plain.close()
    llm = Llama(model_path=gemma_path, n_ctx=512, n_threads=2, verbose=False, draft_model=_Echo(full))
    try:
        g = stream(llm, PA)
        # The second step evaluates a sampled token with 4 right drafts; the
        # calls after it evaluate over the draft rows the stream still reads.
        got = [next(g), next(g)]
        for chunk in g:
            got.append(chunk)
            assert llm.create_completion(PB, max_tokens=2, temperature=0)["choices"][0]["text"]
        assert text(got) == solo
    finally:
        llm.close()
