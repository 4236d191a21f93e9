"""The mixture-of-experts ops (backend.h moe_route / moe_matmul) on their own:
routing against a numpy statement of llama.cpp's build_moe_ffn rules
(softmax / sigmoid / softmax-over-the-chosen gating, selection bias, group-
limited top-k, weight normalisation with its clamp, scaling, ties), and the
expert products against the dense driver (the same kernels, so the same bits)
and the scalar reference, at every ISA level this CPU has, one and two
threads, for decode (one token), an even prefill, a prefill where one expert
gets nearly every token, and per-slot inputs (the down projection).

Every test runs on every compiled backend (a Vulkan build adds "vulkan"). A
GPU backend is compared with the CPU, the reference: the same experts (but
where two selection scores lie within 1e-6, which the device's float sums may
order either way) and weights to rounding; its expert products equal its own
dense matmul of each expert bit for bit (the same shader sums in the same
order) and the CPU's to the float summation order."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from llamapy import _engine as E
from quant_checks import IQ_LATTICE_TYPES, random_iq_blocks

LEVELS = list(E.system_info()["cpu_isas"])
BACKENDS = E.backends()
GPU_BACKENDS = [b for b in BACKENDS if b != "cpu"]


def same_routes(ids, w, cpu_ids, cpu_w, sel):
    """A GPU backend's routing against the CPU's: ids equal except where the
    selection scores of the two experts involved are within 1e-6 (sel: the
    CPU's scores, (n_tok, n_expert)); weights to float rounding."""
    assert ids.shape == cpu_ids.shape and ids.dtype == np.int32 and w.dtype == np.float32
    for t in np.nonzero((ids != cpu_ids).any(axis=1))[0]:
        for a, b in zip(ids[t], cpu_ids[t]):
            assert a == b or abs(sel[t, a] - sel[t, b]) <= 1e-6, (t, ids[t], cpu_ids[t])
    same = (ids == cpu_ids).all(axis=1)
    np.testing.assert_allclose(w[same], cpu_w[same], rtol=2e-5, atol=1e-7)


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


def selection_scores(logits, gating="softmax", bias=None, **_):
    """The scores the experts are chosen by (before group masking), float64."""
    logits = np.asarray(logits, dtype=np.float64)
    if gating == "softmax":
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        p = z / z.sum(axis=1, keepdims=True)
    elif gating == "sigmoid":
        p = 1.0 / (1.0 + np.exp(-logits))
    else:
        p = logits
    return p + (0 if bias is None else np.asarray(bias, dtype=np.float64))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{a}={b}" for a, b in c.items()))
@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("n_tok,n_expert", [(37, 64), (3, 512)])
def test_route_matches_the_rules(backend, case, n_threads, n_tok, n_expert):
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((n_tok, n_expert)).astype(np.float32) * 2
    kw = dict(case)
    if kw.get("bias") == "yes":
        kw["bias"] = (rng.standard_normal(n_expert) * 0.5).astype(np.float32)
    ids, w = E.ops.moe_route(logits, n_threads=n_threads, backend=backend, **kw)
    rids, rw = route_ref(logits, **kw)
    assert ids.dtype == np.int32 and w.dtype == np.float32
    # every row names k distinct experts
    assert all(len(set(r)) == len(r) for r in ids.tolist())
    if backend == "cpu":
        np.testing.assert_array_equal(ids, rids)
        np.testing.assert_allclose(w, rw, rtol=2e-6, atol=1e-7)
    else:
        cpu_ids, cpu_w = E.ops.moe_route(logits, n_threads=n_threads, **kw)
        same_routes(ids, w, cpu_ids, cpu_w, selection_scores(logits, **kw))
        np.testing.assert_allclose(w[(ids == rids).all(axis=1)], rw[(ids == rids).all(axis=1)], rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_route_ties_take_the_lower_expert_and_groups_restrict(backend):
    logits = np.zeros((1, 8), np.float32)
    ids, w = E.ops.moe_route(logits, 3, norm=True, backend=backend)
    assert ids.tolist() == [[0, 1, 2]]
    np.testing.assert_allclose(w, [[1 / 3] * 3], rtol=1e-6)
    # the best expert (7) is alone in a weak group: group-limited routing never picks it
    logits = np.array([[1, 1, 0.9, 0.9, -5, -5, -5, 3]], np.float32)
    ids, _ = E.ops.moe_route(logits, 2, gating="softmax_weight", n_group=4, n_group_used=2, backend=backend)
    assert 7 not in ids[0] and ids.tolist() == [[0, 1]]
    # ties across the whole row, over several rows and many experts: the lowest indices, in order
    logits = np.zeros((4, 300), np.float32)
    logits[:, 299] = 1.0
    ids, _ = E.ops.moe_route(logits, 5, backend=backend)
    assert ids.tolist() == [[299, 0, 1, 2, 3]] * 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_route_norm_clamps_a_vanishing_sum(backend):
    # sigmoid weights of very negative logits: their sum is below F16's
    # smallest normal, so llama.cpp divides by that instead
    logits = np.full((1, 4), -20.0, np.float32)
    _, w = E.ops.moe_route(logits, 2, gating="sigmoid", norm=True, backend=backend)
    p = 1.0 / (1.0 + np.exp(20.0))
    np.testing.assert_allclose(w, [[p / 6.103515625e-5] * 2], rtol=1e-5)


def test_route_expert_scale_multiplies_each_chosen_weight_last():
    """Gemma 4: the normalised top-k weights, each times its expert's ffn_down_exps.scale
    (selection and normalisation unchanged)."""
    rng = np.random.default_rng(11)
    logits = rng.standard_normal((9, 16)).astype(np.float32) * 2
    es = (1.0 + rng.standard_normal(16) * 0.3).astype(np.float32)
    ids, w = E.ops.moe_route(logits, 3, norm=True, expert_scale=es, n_threads=2)
    rids, rw = route_ref(logits, k=3, norm=True)
    np.testing.assert_array_equal(ids, rids)
    np.testing.assert_allclose(w, rw * es[rids], rtol=2e-6, atol=1e-7)
    with pytest.raises(ValueError, match="expert_scale"):
        E.ops.moe_route(logits, 3, expert_scale=np.ones(15, np.float32))


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_route_expert_scale_on_a_gpu_backend(backend):
    """moe_route.comp's per-expert output scales: the CPU's routes and weights."""
    rng = np.random.default_rng(13)
    logits = rng.standard_normal((9, 128)).astype(np.float32) * 2
    es = (1.0 + rng.standard_normal(128) * 0.3).astype(np.float32)
    for kw in (dict(norm=True), dict(gating="sigmoid", norm=True, scale=2.5)):
        ids, w = E.ops.moe_route(logits, 8, expert_scale=es, backend=backend, **kw)
        cids, cw = E.ops.moe_route(logits, 8, expert_scale=es, **kw)
        np.testing.assert_array_equal(ids, cids)
        np.testing.assert_allclose(w, cw, rtol=2e-5, atol=1e-7)
        _, plain = E.ops.moe_route(logits, 8, backend=backend, **kw)
        np.testing.assert_allclose(w, plain * es[ids], rtol=2e-6, atol=1e-7)  # the scale applies last


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_route_limits_of_a_gpu_backend_say_so(backend):
    # one workgroup holds a row's scores: up to 512 experts, 32 chosen
    with pytest.raises(NotImplementedError, match="512 experts"):
        E.ops.moe_route(np.zeros((1, 513), np.float32), 2, backend=backend)
    with pytest.raises(NotImplementedError, match="32 experts"):
        E.ops.moe_route(np.zeros((1, 64), np.float32), 33, backend=backend)


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

TYPES = ["F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "MXFP4", "TQ1_0", "TQ2_0", "IQ4_XS"]
# The grid i-quants (random blocks: llamapy does not quantize to them) on the GPU
# backends; test_iquants_lattice.py checks their CPU expert products.
GPU_TYPES = TYPES + IQ_LATTICE_TYPES


def experts(rng, t, n_expert, rows, cols):
    w = (rng.standard_normal((n_expert * rows, cols)) / np.sqrt(cols)).astype(np.float32)
    if t == "F32":
        return w.view(np.uint8)
    if t == "F16":
        return w.astype(np.float16).view(np.uint8)
    if t in IQ_LATTICE_TYPES:
        return random_iq_blocks(rng, t, w.size // 256).reshape(-1)
    return E.quantize(w, t)


def dense(raw, t, n_expert, rows, cols, x, ids, x_div, level, n_threads=1, backend="cpu"):
    """The same products through the dense driver (another backend: its
    matmul), expert by expert."""
    per = raw.reshape(n_expert, -1)
    y = np.zeros((len(ids), rows), np.float32)
    for e in range(n_expert):
        slots = np.nonzero(ids == e)[0]
        if not len(slots):
            continue
        if backend == "cpu":
            y[slots] = E.matmul(per[e], t, rows, cols, x[slots // x_div], n_threads=n_threads, level=level)
        else:
            y[slots] = E.backend_matmul(backend, np.ascontiguousarray(per[e]), t, rows, cols, x[slots // x_div])
    return y


def near_cpu(got, cpu, t, backend):
    """A GPU backend's products against the CPU's: the same converted
    activations and integer block sums, so only the float summation order
    differs; types without a shader of their own run dequantized to F16."""
    own = t in getattr(E, f"{backend}_matmul_types")()
    err = np.abs(got - cpu).max() / np.abs(cpu).max()
    assert err <= (5e-6 if own else 2e-2), (t, err)


SHAPES = {
    "decode": (1, 8, 32),           # one token, 8 of 32 experts
    "prefill": (40, 2, 8),          # 40 tokens, 2 of 8 experts each
    "skewed": (64, 2, 16),          # almost every token picks expert 3
}


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_products_equal_the_dense_driver(t, shape):
    raw, x, ids, (n_tok, k, n_expert), rows, cols = products_case(t, shape)
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


def products_case(t, shape):
    """Experts of type t, tokens and each token's k distinct experts for a SHAPES entry."""
    rng = np.random.default_rng(10 * GPU_TYPES.index(t) + list(SHAPES).index(shape))
    n_tok, k, n_expert = SHAPES[shape]
    rows, cols = 48, 256
    raw = experts(rng, t, n_expert, rows, cols)
    x = rng.standard_normal((n_tok, cols)).astype(np.float32)
    ids = np.stack([rng.choice(n_expert, k, replace=False) for _ in range(n_tok)]).astype(np.int32)
    if shape == "skewed":
        ids[:, 0] = 3
        ids[:, 1] = np.where(ids[:, 1] == 3, 4, ids[:, 1])
        ids[5, 1] = 7
    return raw, x, ids, (n_tok, k, n_expert), rows, cols


@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("t", GPU_TYPES)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_gpu_products_equal_its_dense_matmul(backend, t, shape):
    raw, x, ids, (n_tok, k, n_expert), rows, cols = products_case(t, shape)
    got = E.ops.moe_matmul(raw, t, n_expert, rows, cols, x, ids, backend=backend)
    assert got.shape == (n_tok * k, rows) and np.isfinite(got).all()
    np.testing.assert_array_equal(got, dense(raw, t, n_expert, rows, cols, x, ids.reshape(-1), k, "best",
                                             backend=backend))
    near_cpu(got, E.ops.moe_matmul(raw, t, n_expert, rows, cols, x, ids), t, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("t", ["F32", "Q8_0", "Q4_K"])
def test_per_slot_inputs_and_biases(backend, t):
    """The down projection: one input row per slot; per-expert biases added."""
    rng = np.random.default_rng(11)
    n_expert, rows, cols, n_slots = 6, 32, 256, 30
    raw = experts(rng, t, n_expert, rows, cols)
    x = rng.standard_normal((n_slots, cols)).astype(np.float32)
    ids = rng.integers(0, n_expert, n_slots).astype(np.int32)
    bias = rng.standard_normal((n_expert, rows)).astype(np.float32)
    got = E.ops.moe_matmul(raw, t, n_expert, rows, cols, x, ids, bias=bias, n_threads=2, backend=backend)
    want = dense(raw, t, n_expert, rows, cols, x, ids, 1, "best", backend=backend) + bias[ids]
    np.testing.assert_array_equal(got, want)
    if backend != "cpu":
        near_cpu(got, E.ops.moe_matmul(raw, t, n_expert, rows, cols, x, ids, bias=bias), t, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_products_reject_bad_ids_and_shapes(backend):
    rng = np.random.default_rng(1)
    raw = experts(rng, "F32", 4, 8, 32)
    x = np.zeros((2, 32), np.float32)
    mm = functools.partial(E.ops.moe_matmul, backend=backend)
    with pytest.raises(ValueError, match="names expert 4 of 4"):
        mm(raw, "F32", 4, 8, 32, x, np.array([[0, 4], [1, 2]], np.int32))
    with pytest.raises(ValueError, match="names expert -1"):
        mm(raw, "F32", 4, 8, 32, x, np.array([[0, -1], [1, 2]], np.int32))
    with pytest.raises(ValueError, match="weight data size"):
        mm(raw, "F32", 5, 8, 32, x, np.array([[0, 1], [1, 2]], np.int32))
    with pytest.raises(ValueError, match="rows for ids"):
        mm(raw, "F32", 4, 8, 32, x, np.array([[0, 1, 2], [1, 2, 3]], np.int32)[:1])
