"""The mixture-of-experts ops (backend.h moe_route / moe_matmul) on their own:
routing against a numpy statement of llama.cpp's build_moe_ffn rules
(softmax / sigmoid / softmax-over-the-chosen gating, selection bias, group-
limited top-k, weight normalisation with its clamp, scaling, ties), and the
expert products against the dense driver (the same kernels, so the same bits)
and the scalar reference, at every ISA level this CPU has, one and two
threads, for decode (one token), an even prefill, a prefill where one expert
gets nearly every token, and per-slot inputs (the down projection)."""

from __future__ import annotations

import numpy as np
import pytest

from llamapy import _engine as E

LEVELS = list(E.system_info()["cpu_isas"])


# ---------------------------------------------------------------------------
# Routing
# ---------------------------------------------------------------------------


def route_ref(logits, k, gating="softmax", bias=None, n_group=0, n_group_used=0, norm=False, scale=0.0):
    logits = np.asarray(logits, dtype=np.float64)
    if gating == "softmax":
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs = z / z.sum(axis=1, keepdims=True)
    elif gating == "sigmoid":
        probs = 1.0 / (1.0 + np.exp(-logits))
    else:
        probs = logits.copy()
    sel = probs + (0 if bias is None else np.asarray(bias, dtype=np.float64))
    if n_group > 1:
        g = sel.reshape(len(sel), n_group, -1)
        score = np.sort(g, axis=2)[:, :, -2:].sum(axis=2)
        keep = np.argsort(-score, axis=1, kind="stable")[:, :n_group_used]
        mask = np.full(g.shape, -np.inf)
        for t in range(len(sel)):
            mask[t, keep[t]] = 0.0
        sel = (g + mask).reshape(sel.shape)
    ids = np.argsort(-sel, axis=1, kind="stable")[:, :k]
    w = np.take_along_axis(probs, ids, axis=1)
    if gating == "softmax_weight":
        z = np.exp(w - w.max(axis=1, keepdims=True))
        w = z / z.sum(axis=1, keepdims=True)
    if norm:
        w = w / np.maximum(w.sum(axis=1, keepdims=True), 6.103515625e-5)
    if scale not in (0.0, 1.0):
        w = w * scale
    return ids, w


CASES = [
    dict(k=2),
    dict(k=8, norm=True),
    dict(k=4, gating="sigmoid", norm=True, scale=2.5),
    dict(k=4, gating="softmax_weight"),
    dict(k=6, gating="sigmoid", bias="yes", n_group=8, n_group_used=3, norm=True, scale=2.5),
    dict(k=2, gating="softmax", n_group=4, n_group_used=2),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{a}={b}" for a, b in c.items()))
@pytest.mark.parametrize("n_threads", [1, 2])
def test_route_matches_the_rules(case, n_threads):
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((37, 64)).astype(np.float32) * 2
    kw = dict(case)
    if kw.get("bias") == "yes":
        kw["bias"] = (rng.standard_normal(64) * 0.5).astype(np.float32)
    ids, w = E.ops.moe_route(logits, n_threads=n_threads, **kw)
    rids, rw = route_ref(logits, **kw)
    np.testing.assert_array_equal(ids, rids)
    np.testing.assert_allclose(w, rw, rtol=2e-6, atol=1e-7)
    assert ids.dtype == np.int32 and w.dtype == np.float32
    # every row names k distinct experts
    assert all(len(set(r)) == len(r) for r in ids.tolist())


def test_route_ties_take_the_lower_expert_and_groups_restrict():
    logits = np.zeros((1, 8), np.float32)
    ids, w = E.ops.moe_route(logits, 3, norm=True)
    assert ids.tolist() == [[0, 1, 2]]
    np.testing.assert_allclose(w, [[1 / 3] * 3], rtol=1e-6)
    # the best expert (7) is alone in a weak group: group-limited routing never picks it
    logits = np.array([[1, 1, 0.9, 0.9, -5, -5, -5, 3]], np.float32)
    ids, _ = E.ops.moe_route(logits, 2, gating="softmax_weight", n_group=4, n_group_used=2)
    assert 7 not in ids[0] and ids.tolist() == [[0, 1]]


def test_route_norm_clamps_a_vanishing_sum():
    # sigmoid weights of very negative logits: their sum is below F16's
    # smallest normal, so llama.cpp divides by that instead
    logits = np.full((1, 4), -20.0, np.float32)
    _, w = E.ops.moe_route(logits, 2, gating="sigmoid", norm=True)
    p = 1.0 / (1.0 + np.exp(20.0))
    np.testing.assert_allclose(w, [[p / 6.103515625e-5] * 2], rtol=1e-5)


def test_route_rejects_bad_arguments():
    logits = np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match="k must be"):
        E.ops.moe_route(logits, 9)
    with pytest.raises(ValueError, match="gating"):
        E.ops.moe_route(logits, 2, gating="relu")
    with pytest.raises(ValueError, match="groups"):
        E.ops.moe_route(logits, 2, n_group=3, n_group_used=1)  # 8 experts do not split into 3 groups
    with pytest.raises(ValueError, match="bias"):
        E.ops.moe_route(logits, 2, bias=np.zeros(7, np.float32))


# ---------------------------------------------------------------------------
# Expert products
# ---------------------------------------------------------------------------

TYPES = ["F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL"]


def experts(rng, t, n_expert, rows, cols):
    w = (rng.standard_normal((n_expert * rows, cols)) / np.sqrt(cols)).astype(np.float32)
    if t == "F32":
        return w.view(np.uint8)
    if t == "F16":
        return w.astype(np.float16).view(np.uint8)
    return E.quantize(w, t)


def dense(raw, t, n_expert, rows, cols, x, ids, x_div, level, n_threads=1):
    """The same products through the dense driver, expert by expert."""
    per = raw.reshape(n_expert, -1)
    y = np.zeros((len(ids), rows), np.float32)
    for e in range(n_expert):
        slots = np.nonzero(ids == e)[0]
        if len(slots):
            y[slots] = E.matmul(per[e], t, rows, cols, x[slots // x_div], n_threads=n_threads, level=level)
    return y


SHAPES = {
    "decode": (1, 8, 32),           # one token, 8 of 32 experts
    "prefill": (40, 2, 8),          # 40 tokens, 2 of 8 experts each
    "skewed": (64, 2, 16),          # almost every token picks expert 3
}


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_products_equal_the_dense_driver(t, shape):
    rng = np.random.default_rng(10 * TYPES.index(t) + list(SHAPES).index(shape))
    n_tok, k, n_expert = SHAPES[shape]
    rows, cols = 48, 256
    raw = experts(rng, t, n_expert, rows, cols)
    x = rng.standard_normal((n_tok, cols)).astype(np.float32)
    ids = np.stack([rng.choice(n_expert, k, replace=False) for _ in range(n_tok)]).astype(np.int32)
    if shape == "skewed":
        ids[:, 0] = 3
        ids[:, 1] = np.where(ids[:, 1] == 3, 4, ids[:, 1])
        ids[5, 1] = 7
    flat = ids.reshape(-1)
    for level in LEVELS:
        want = dense(raw, t, n_expert, rows, cols, x, flat, k, level)
        for n_threads in (1, 2):
            got = E.ops.moe_matmul(raw, t, n_expert, rows, cols, x, ids, n_threads=n_threads, level=level)
            np.testing.assert_array_equal(got, want, err_msg=f"{t} {level} threads={n_threads}")
    ref = E.ops.moe_matmul(raw, t, n_expert, rows, cols, x, ids, level="ref")
    got = E.ops.moe_matmul(raw, t, n_expert, rows, cols, x, ids)
    scale = np.abs(ref).max()
    assert np.abs(got - ref).max() <= 1e-4 * scale, t


@pytest.mark.parametrize("t", ["F32", "Q8_0", "Q4_K"])
def test_per_slot_inputs_and_biases(t):
    """The down projection: one input row per slot; per-expert biases added."""
    rng = np.random.default_rng(11)
    n_expert, rows, cols, n_slots = 6, 32, 256, 30
    raw = experts(rng, t, n_expert, rows, cols)
    x = rng.standard_normal((n_slots, cols)).astype(np.float32)
    ids = rng.integers(0, n_expert, n_slots).astype(np.int32)
    bias = rng.standard_normal((n_expert, rows)).astype(np.float32)
    got = E.ops.moe_matmul(raw, t, n_expert, rows, cols, x, ids, bias=bias, n_threads=2)
    want = dense(raw, t, n_expert, rows, cols, x, ids, 1, "best") + bias[ids]
    np.testing.assert_array_equal(got, want)


def test_products_reject_bad_ids_and_shapes():
    rng = np.random.default_rng(1)
    raw = experts(rng, "F32", 4, 8, 32)
    x = np.zeros((2, 32), np.float32)
    with pytest.raises(ValueError, match="names expert 4 of 4"):
        E.ops.moe_matmul(raw, "F32", 4, 8, 32, x, np.array([[0, 4], [1, 2]], np.int32))
    with pytest.raises(ValueError, match="names expert -1"):
        E.ops.moe_matmul(raw, "F32", 4, 8, 32, x, np.array([[0, -1], [1, 2]], np.int32))
    with pytest.raises(ValueError, match="weight data size"):
        E.ops.moe_matmul(raw, "F32", 5, 8, 32, x, np.array([[0, 1], [1, 2]], np.int32))
    with pytest.raises(ValueError, match="rows for ids"):
        E.ops.moe_matmul(raw, "F32", 4, 8, 32, x, np.array([[0, 1, 2], [1, 2, 3]], np.int32)[:1])
