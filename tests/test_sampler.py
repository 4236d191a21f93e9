"""The native sampler chain against numpy references."""
from __future__ import annotations

import numpy as np
import pytest

from llamapy import _engine


def logits_for(seed: int, n: int = 500) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(n) * 3).astype(np.float32)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def draw_many(sampler, logits, n):
    return np.array([sampler.sample(logits) for _ in range(n)])


def test_greedy_is_argmax_and_ties_pick_lowest_id():
    l = logits_for(0)
    assert _engine.Sampler(len(l), temperature=0.0).sample(l) == int(np.argmax(l))
    tie = np.zeros(10, dtype=np.float32)
    tie[[3, 7]] = 1.0
    assert _engine.Sampler(10, temperature=0.0).sample(tie) == 3


def _plain_argmax(x: np.ndarray) -> int:
    # the definition the native scan must keep: `if x[i] > x[best]: best = i`
    best = 0
    for i in range(1, len(x)):
        if x[i] > x[best]:
            best = i
    return best


def _vocab_cases():
    rng = np.random.default_rng(11)
    for n in (1, 15, 16, 255, 256, 257, 1000, 4099):
        yield rng.standard_normal(n).astype(np.float32)
        x = np.full(n, -np.inf, dtype=np.float32)  # nothing above -inf
        yield x
        x = rng.standard_normal(n).astype(np.float32)
        x[rng.integers(0, n, max(1, n // 7))] = np.nan
        yield x
        x = np.round(rng.standard_normal(n) * 2).astype(np.float32)  # many ties, across blocks
        yield x
        x = rng.standard_normal(n).astype(np.float32)
        x[0] = np.nan  # NaN first: nothing beats it in the plain loop
        yield x
        x = np.full(n, np.nan, dtype=np.float32)
        x[-1] = -np.inf
        yield x
        x = rng.standard_normal(n).astype(np.float32)
        x[-1] = 100.0  # the winner in the last, partial block
        yield x


def test_greedy_block_scan_equals_the_plain_loop():
    for x in _vocab_cases():
        want = _plain_argmax(x)
        assert _engine.argmax(x) == want
        if not np.isnan(x).any():
            assert _engine.Sampler(len(x), temperature=0.0).sample(x) == want


def test_top_logprobs_block_scan_equals_a_full_sort():
    # compute_logprobs' top entries come from the same block-skipping top-k
    # selection as the sampler's: same ids, ties to the lower id
    for x in _vocab_cases():
        if np.isnan(x).any() or np.isinf(x).all():
            continue
        for k in (1, 5, 40):
            _, top = _engine.logprobs(x, 0, k)
            order = sorted(range(len(x)), key=lambda i: (-x[i], i))[:k]
            assert [t[0] for t in top] == order


def test_top_k_one_is_greedy():
    l = logits_for(1)
    s = _engine.Sampler(len(l), temperature=1.0, top_k=1, top_p=1.0, min_p=0.0, seed=5)
    assert set(draw_many(s, l, 50)) == {int(np.argmax(l))}


def test_seed_reproducible_and_different_seeds_differ():
    l = logits_for(2)
    a = draw_many(_engine.Sampler(len(l), seed=123), l, 100)
    b = draw_many(_engine.Sampler(len(l), seed=123), l, 100)
    c = draw_many(_engine.Sampler(len(l), seed=124), l, 100)
    assert (a == b).all()
    assert (a != c).any()


def test_untruncated_sampling_follows_softmax():
    l = (np.random.default_rng(3).standard_normal(8)).astype(np.float32)
    s = _engine.Sampler(8, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=9)
    n = 40000
    counts = np.bincount(draw_many(s, l, n), minlength=8) / n
    assert np.abs(counts - softmax(l.astype(np.float64))).max() < 0.01


def test_temperature_sharpens():
    l = (np.random.default_rng(4).standard_normal(8)).astype(np.float32)
    s = _engine.Sampler(8, temperature=0.5, top_k=0, top_p=1.0, min_p=0.0, seed=1)
    n = 40000
    counts = np.bincount(draw_many(s, l, n), minlength=8) / n
    assert np.abs(counts - softmax(l.astype(np.float64) / 0.5)).max() < 0.01


def test_top_k_top_p_min_p_restrict_support():
    l = logits_for(5, 200)
    order = np.argsort(-l, kind="stable")
    s = _engine.Sampler(len(l), temperature=1.0, top_k=5, top_p=1.0, min_p=0.0, seed=2)
    assert set(draw_many(s, l, 300)) <= set(order[:5].tolist())

    p = softmax(l.astype(np.float64))[order]
    k = int(np.searchsorted(np.cumsum(p), 0.5) + 1)
    s = _engine.Sampler(len(l), temperature=1.0, top_k=0, top_p=0.5, min_p=0.0, seed=2)
    assert set(draw_many(s, l, 300)) <= set(order[:k].tolist())

    s = _engine.Sampler(len(l), temperature=1.0, top_k=0, top_p=1.0, min_p=0.3, seed=2)
    allowed = set(np.nonzero(softmax(l.astype(np.float64)) >= 0.3 * softmax(l.astype(np.float64)).max())[0].tolist())
    assert set(draw_many(s, l, 300)) <= allowed


def test_logit_bias_bans_and_forces():
    l = logits_for(6, 50)
    best = int(np.argmax(l))
    s = _engine.Sampler(50, temperature=0.0)
    s.set_logit_bias([(best, float("-inf"))])
    assert s.sample(l) != best
    s.set_logit_bias([(7, 1000.0)])
    assert s.sample(l) == 7
    with pytest.raises(ValueError, match="outside the vocabulary"):
        s.set_logit_bias([(50, 1.0)])


def test_repeat_presence_frequency_penalties():
    l = np.array([2.0, 1.9, -1.0, 0.5], dtype=np.float32)
    s = _engine.Sampler(4, temperature=0.0, repeat_penalty=1.5, penalty_last_n=8)
    s.accept(0)
    assert s.sample(l) == 1  # 2.0 / 1.5 < 1.9
    s = _engine.Sampler(4, temperature=0.0, presence_penalty=0.5, penalty_last_n=8)
    s.accept(0)
    assert s.sample(l) == 1
    s = _engine.Sampler(4, temperature=0.0, frequency_penalty=0.05, penalty_last_n=8)
    s.accept(0)
    assert s.sample(l) == 0  # 2.0 - 0.05 > 1.9
    s.accept(0)
    s.accept(0)
    assert s.sample(l) == 1  # 2.0 - 0.15 < 1.9
    # the window forgets old tokens
    s = _engine.Sampler(4, temperature=0.0, repeat_penalty=1.5, penalty_last_n=1)
    s.accept(0)
    s.accept(3)
    assert s.sample(l) == 0


@pytest.mark.parametrize("mode", [1, 2])
def test_mirostat_samples_valid_tokens(mode):
    l = logits_for(7, 1000)
    s = _engine.Sampler(1000, temperature=1.0, mirostat=mode, mirostat_tau=3.0, mirostat_eta=0.1, seed=3)
    toks = []
    for _ in range(200):
        t = s.sample(l)
        s.accept(t)
        toks.append(t)
    assert all(0 <= t < 1000 for t in toks)
    # mirostat keeps surprise near tau: the tokens are mostly high-probability ones
    p = softmax(l.astype(np.float64))
    assert np.mean(-np.log2(p[toks])) < 6.0


def test_logprobs_match_numpy():
    l = logits_for(8, 3000)
    ref = l.astype(np.float64) - np.log(np.sum(np.exp(l.astype(np.float64) - l.max()))) - l.max()
    chosen, top = _engine.logprobs(l, 17, 5)
    assert chosen == pytest.approx(ref[17], abs=1e-4)
    ids = [i for i, _ in top]
    assert ids == np.argsort(-l, kind="stable")[:5].tolist()
    for i, lp in top:
        assert lp == pytest.approx(ref[i], abs=1e-4)


def test_bad_arguments():
    with pytest.raises(ValueError):
        _engine.Sampler(0)
    with pytest.raises(ValueError):
        _engine.Sampler(10, mirostat=3)
    s = _engine.Sampler(10)
    with pytest.raises(ValueError, match="n_vocab"):
        s.sample(np.zeros(11, dtype=np.float32))
