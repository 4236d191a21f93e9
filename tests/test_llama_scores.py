"""``Llama.scores`` / ``_scores`` / ``eval_logits`` / ``eval_tokens`` with
llama-cpp-python's shapes, and the memory they (do not) use."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import deque
from pathlib import Path

import numpy as np
import pytest

from llamapy._scores import LazyRows

pytestmark = pytest.mark.model

PROMPT = b"The largest planet in the solar system is"


@pytest.fixture(scope="module")
def pair(gemma_path):
    """The same model without and with logits_all."""
    from llamapy import Llama

    a = Llama(model_path=gemma_path, n_ctx=96, n_threads=2, verbose=False)
    b = Llama(model_path=gemma_path, n_ctx=96, n_threads=2, verbose=False, logits_all=True)
    yield a, b
    a.close()
    b.close()


def test_scores_shape_and_last_row_without_logits_all(pair):
    a, b = pair
    ids = a.tokenize(PROMPT)
    a.reset(), b.reset()
    a.eval(ids)
    b.eval(ids)
    n = len(ids)
    assert a.scores.shape == (a.n_ctx(), a.n_vocab()) and a.scores.dtype == np.float32
    np.testing.assert_allclose(a.scores[a.n_tokens - 1], b.scores[n - 1], rtol=0, atol=1e-5)
    assert not a.scores[: n - 1].any() and not a.scores[n:].any()  # no stale or invented rows
    assert a._scores.shape == (n, a.n_vocab())
    # One more token: the new last row is filled, the old one is cleared.
    a.eval([ids[1]])
    b.eval([ids[1]])
    np.testing.assert_allclose(a.scores[n], b.scores[n], rtol=0, atol=1e-5)
    assert not a.scores[n - 1].any()
    # A different text of the same length after reset: the row is rewritten.
    other = a.tokenize(b"Completely different words here, many of them now")[: n + 1]
    a.reset(), b.reset()
    a.eval(other)
    b.eval(other)
    np.testing.assert_allclose(a.scores[len(other) - 1], b.scores[len(other) - 1], rtol=0, atol=1e-5)


def test_scores_with_logits_all_fill_every_row(pair):
    _, b = pair
    ids = b.tokenize(PROMPT)
    b.reset()
    b.eval(ids)
    assert b.scores.shape == (b.n_ctx(), b.n_vocab())
    assert all(b.scores[i].any() for i in range(len(ids)))
    assert b._scores.shape == (len(ids), b.n_vocab())
    logits = b.eval_logits
    assert isinstance(logits, deque) and len(logits) == len(ids) and logits.maxlen == b.n_ctx()
    assert logits[0] == pytest.approx(b.scores[0].tolist())


def test_eval_logits_and_tokens_are_deques(pair):
    a, _ = pair
    ids = a.tokenize(PROMPT)
    a.reset()
    assert list(a.eval_logits) == []
    a.eval(ids)
    logits = a.eval_logits
    assert isinstance(logits, deque) and logits.maxlen == 1 and len(logits) == 1
    assert logits[0] == pytest.approx(a.scores[len(ids) - 1].tolist())
    toks = a.eval_tokens
    assert isinstance(toks, deque) and list(toks) == ids and toks.maxlen == a.n_ctx()


def test_lazy_rows_clear_and_zero():
    rows = LazyRows(5, 1000)  # rows that do not start on page boundaries
    rows.array[:] = 1.0
    rows.clear_row(2)
    assert not rows.array[2].any()
    assert rows.array[[0, 1, 3, 4]].all()


def test_scores_peak_memory_stays_low(gemma_path, tmp_path):
    # 262k vocabulary x n_ctx 2048 is 2 GiB; reading scores after every
    # generated token must only ever hold about one row.
    script = textwrap.dedent(f"""
        import json, resource, sys
        import numpy as np
        from llamapy import Llama
        def rss_mib():
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        llm = Llama(model_path={gemma_path!r}, n_ctx=2048, n_threads=2, verbose=False)
        llm.eval(llm.tokenize(b"Hello"))
        base = rss_mib()
        rows = []
        for i in range(300):
            rows.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
            llm.eval([rows[-1]])
        shape = list(llm.scores.shape)
        print(json.dumps({{"grew_mib": rss_mib() - base, "shape": shape}}))
    """)
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/status")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["shape"] == [2048, 262144]
    assert res["grew_mib"] < 150, res  # 300 committed rows would be 300 MiB
