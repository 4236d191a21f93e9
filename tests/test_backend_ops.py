"""The cross-backend op test: every op of the backend seam
(vendor/engine/backend/backend.h) on every compiled backend, against numpy
and against the CPU backend, the reference. A GPU backend compiled in (the
Vulkan one: CMAKE_ARGS="-DLLAMAPY_VULKAN=ON") joins through
_engine.backends(); tests/test_vulkan.py has its own cases. Attention has its
own file (test_attention_ops.py). The recurrent layers' ops (ssm_conv, gated_delta,
ssm_scan) are held against the numpy statements of tests/test_delta_net_ops.py and
tests/test_ssm_scan_ops.py, which also test the CPU's on their own (threads, split batches)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import model_ref as R
from llamapy import _engine as E
from test_delta_net_ops import conv_ref, delta_ref
from test_ssm_scan_ops import scan_ref

BACKENDS = E.backends()
rng = np.random.default_rng(7)
N, COLS = 5, 128
Y = rng.standard_normal((N, COLS)).astype(np.float32)
X = rng.standard_normal((N, COLS)).astype(np.float32)
W = (1 + 0.3 * rng.standard_normal(COLS)).astype(np.float32)
B = rng.standard_normal(COLS).astype(np.float32)
# weighted_sum: 3 expert outputs per row and their weights
XG = rng.standard_normal((N, 3 * COLS)).astype(np.float32)
WG = rng.uniform(0, 1, (N, 3)).astype(np.float32)


def rms(y, w=None, eps=1e-6):
    y = y.astype(np.float64)
    out = y / np.sqrt((y * y).mean(-1, keepdims=True) + eps)
    return out * w if w is not None else out


def ln(y, w, b, eps=1e-5):
    y = y.astype(np.float64)
    mu = y.mean(-1, keepdims=True)
    out = (y - mu) / np.sqrt(((y - mu) ** 2).mean(-1, keepdims=True) + eps)
    return out * (1 if w is None else w) + (0 if b is None else b)


def swiglu_oai(y, x, limit, alpha):
    g = np.minimum(y.astype(np.float64), limit)
    u = np.clip(x.astype(np.float64), -limit, limit)
    return g / (1 + np.exp(-alpha * g)) * (u + 1)


def sigmoid(a):
    return 1.0 / (1.0 + np.exp(-a.astype(np.float64)))


def softplus(v):
    return np.where(v > 20, v, np.log1p(np.exp(np.minimum(v, 20))))


def rope_tables(pos, n_rot, base=10000.0):
    half = n_rot // 2
    ang = np.asarray(pos, dtype=np.float64)[:, None] * base ** (-2.0 * np.arange(half) / n_rot)[None, :]
    return np.stack([np.cos(ang), np.sin(ang)], axis=-1).reshape(len(pos), n_rot).astype(np.float32)


# (name, kwargs of backend_row_op, numpy reference, tolerance)
CASES = [
    ("rms_norm", dict(kind="rms_norm", x=X, w=W, f=1e-6), rms(X, W), 1e-5),
    ("rms_norm in place, no weight", dict(kind="rms_norm", f=1e-6), rms(Y), 1e-5),
    ("rms_norm per head", dict(kind="rms_norm", w=W[:32], f=1e-6, groups=4),
     rms(Y.reshape(N, 4, 32), W[:32]).reshape(N, COLS), 1e-5),
    ("layer_norm", dict(kind="layer_norm", x=X, w=W, b=B, f=1e-5), ln(X, W, B), 1e-5),
    ("layer_norm no bias", dict(kind="layer_norm", x=X, w=W, f=1e-5), ln(X, W, None), 1e-5),
    ("add", dict(kind="add", x=X), Y + X, 1e-6),
    ("add bias", dict(kind="add", x=B), Y + B, 1e-6),
    ("mul", dict(kind="mul", x=W), Y * W, 1e-6),
    ("scale", dict(kind="scale", f=0.125), Y * 0.125, 1e-6),
    ("softcap", dict(kind="softcap", f=1.5), np.tanh(Y / 1.5) * 1.5, 1e-6),
    ("silu_mul", dict(kind="silu_mul", x=X), R.silu(Y.astype(np.float64)) * X, 1e-5),
    ("silu no gate", dict(kind="silu_mul"), R.silu(Y.astype(np.float64)), 1e-5),
    ("gelu_mul", dict(kind="gelu_mul", x=X), R.gelu_f16(Y) * X, 1e-5),
    ("gelu_quick_mul", dict(kind="gelu_quick_mul", x=X), R.gelu_quick_f16(Y) * X, 1e-5),
    ("gelu_quick no gate", dict(kind="gelu_quick_mul"), R.gelu_quick_f16(Y), 1e-5),
    ("hadamard", dict(kind="hadamard", a=64), R.rotate_blocks(Y.astype(np.float64), 64), 1e-5),
    ("copy", dict(kind="copy", x=X), X, 0),
    ("weighted_sum", dict(kind="weighted_sum", x=XG, w=WG, groups=3),
     sum(WG[:, g:g + 1].astype(np.float64) * XG[:, g * COLS:(g + 1) * COLS] for g in range(3)), 1e-6),
    ("weighted_sum one part", dict(kind="weighted_sum", x=XG[:, :COLS], w=WG[:, :1], groups=1),
     WG[:, :1].astype(np.float64) * XG[:, :COLS], 1e-7),
    # a limit of 1.5 clamps both operands of the standard-normal rows often
    ("swiglu_oai", dict(kind="swiglu_oai", x=X, f=1.5, f2=1.702), swiglu_oai(Y, X, 1.5, 1.702), 1e-5),
    # the recurrent layers' gates (ggml's formulas: tests/test_delta_net_ops.py)
    ("sigmoid_mul", dict(kind="sigmoid_mul", x=X), Y * sigmoid(X), 1e-6),
    ("sigmoid no gate", dict(kind="sigmoid_mul"), sigmoid(Y), 1e-6),
    ("softplus_mul", dict(kind="softplus_mul", w=-W, b=B), softplus(Y.astype(np.float64) + B) * -W, 1e-6),
    ("scale_by", dict(kind="scale_by", x=X[:, :1]), Y * X[:, :1], 1e-7),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,kw,ref,tol", CASES, ids=[c[0] for c in CASES])
def test_row_op(backend, name, kw, ref, tol):
    got = E.backend_row_op(backend, y=Y, **kw)
    assert got.shape == Y.shape and got.dtype == np.float32
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err <= tol, f"{name}: {err:.2e}"
    if backend != "cpu":
        np.testing.assert_allclose(got, E.backend_row_op("cpu", y=Y, **kw), rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("n_rot", [32, 16])
def test_rope(backend, neox, n_rot):
    pos = [0, 3, 7, 100, 2048]
    heads, hd = 4, 32
    got = E.backend_row_op(backend, "rope", Y, x=rope_tables(pos, n_rot), groups=heads, a=n_rot, neox=neox)
    ref = R.rope(Y.reshape(N, heads, hd).astype(np.float64), pos, 10000.0, n_rot, neox).reshape(N, COLS)
    assert np.abs(got - ref).max() < 1e-5


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("wtype", ["F32", "F16", "Q8_0"])
@pytest.mark.parametrize("n", [1, 7])
def test_matmul(backend, wtype, n):
    w = (rng.standard_normal((48, COLS)) / math.sqrt(COLS)).astype(np.float32)
    raw = E.quantize(w, wtype)
    x = rng.standard_normal((n, COLS)).astype(np.float32)
    got = E.backend_matmul(backend, raw, wtype, 48, COLS, x)
    ref = R.matmul(x, R.as_stored(w, wtype), wtype)
    assert got.shape == (n, 48)
    assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-5


@pytest.mark.parametrize("backend", BACKENDS)
def test_get_rows(backend):
    table = rng.standard_normal((10, COLS)).astype(np.float32)
    ids = [3, 0, 9, 3]
    for wtype in ("F32", "F16", "Q8_0"):
        got = E.backend_get_rows(backend, E.quantize(table, wtype), wtype, 10, COLS, ids)
        np.testing.assert_array_equal(got, R.as_stored(table, wtype)[ids].astype(np.float32))


KV_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ktype", KV_TYPES)
def test_kv_store(backend, ktype):
    # Rows land in their cells as E.quantize stores them (the reference
    # converters: the CPU's SIMD ones give the same bytes); other cells untouched.
    x = (rng.standard_normal((7, 96)) * rng.uniform(0.01, 5, (7, 1))).astype(np.float32)
    x[2, :32] = 0  # an all-zero block
    cells = [5, 0, 9, 2, 11, 3, 7]
    got = np.frombuffer(E.backend_kv_store(backend, ktype, x, cells, 12), np.uint8).reshape(12, -1)
    want = np.asarray(E.quantize(x, ktype), np.uint8).reshape(7, -1)
    assert got.shape[1] == want.shape[1]
    np.testing.assert_array_equal(got[cells], want)
    untouched = sorted(set(range(12)) - set(cells))
    assert not got[untouched].any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_kv_store_quantizes_as_the_cpu_on_many_blocks(backend):
    # Q8_0's scale and rounding on thousands of blocks of varied magnitude:
    # the same bytes as the CPU backend (a division rounded one ULP off
    # flips a quant where x / d lies near a half).
    x = (rng.standard_normal((64, 1024)) * np.exp(rng.uniform(-6, 6, (64, 1)))).astype(np.float32)
    cells = list(range(63, -1, -1))
    for ktype in ("Q8_0", "Q5_1", "IQ4_NL"):  # IQ4_NL: a scale search with 17 divisions and fits per block
        assert (E.backend_kv_store(backend, ktype, x, cells, 64) == E.backend_kv_store("cpu", ktype, x, cells, 64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_rows(backend):
    data = rng.standard_normal((9, 33)).astype(np.float32)
    idx = [0, 2, 3, 7, 8]
    got = E.backend_gather_rows(backend, data, idx)
    np.testing.assert_array_equal(got[:5], data[idx])
    np.testing.assert_array_equal(got[5:], data[5:])


@pytest.mark.parametrize("backend", BACKENDS)
def test_softplus_threshold(backend):
    # past ggml's threshold (20) softplus is v itself; far below it e^v vanishes
    y = Y[:2].copy()
    y[0, :4] = [25.0, -30.0, 19.0, 20.5]
    got = E.backend_row_op(backend, "softplus_mul", y, w=W, b=B)
    ref = softplus(y.astype(np.float64) + B) * W
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


# (n rows, channels, kernel width, state slots, each row's slot): several sequences
# interleaved, one row, odd channel counts (not a multiple of the 64-wide workgroups)
CONV_SHAPES = [(7, 24, 4, 3, [0, 2, 0, 1, 2, 2, 0]), (1, 130, 4, 1, [0]), (9, 67, 3, 2, [1, 1, 0, 1, 0, 0, 1, 1, 0]),
               (5, 200, 2, 4, [3, 3, 3, 0, 3])]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n,C,d,n_slot,slot", CONV_SHAPES, ids=[f"n{c[0]}-C{c[1]}-d{c[2]}" for c in CONV_SHAPES])
def test_ssm_conv(backend, n, C, d, n_slot, slot):
    x = rng.standard_normal((n, C)).astype(np.float32)
    w = rng.standard_normal((C, d)).astype(np.float32)
    state = rng.standard_normal((n_slot, C, d - 1)).astype(np.float32)
    slot = np.array(slot, dtype=np.int32)
    y, st = E.backend_ssm_conv(backend, x, w, state, slot)
    ry, rst = conv_ref(x, w, state, slot)
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(st, rst.astype(np.float32))  # the tails are copies: exact, untouched slots too
    if backend != "cpu":
        cy, cst = E.backend_ssm_conv("cpu", x, w, state, slot)
        np.testing.assert_allclose(y, cy, rtol=0, atol=1e-5)
        np.testing.assert_array_equal(st, cst)


# (n rows, key heads, value heads, head size, state slots, each row's slot)
DELTA_SHAPES = [(6, 2, 4, 8, 2, [1, 0, 1, 1, 0, 1]), (1, 1, 1, 16, 1, [0]), (5, 3, 3, 5, 3, [2, 0, 2, 1, 2]),
                (4, 2, 6, 32, 1, [0, 0, 0, 0]), (3, 1, 2, 128, 2, [1, 0, 1])]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n,Hk,Hv,S,n_slot,slot", DELTA_SHAPES,
                         ids=[f"n{c[0]}-Hk{c[1]}-Hv{c[2]}-S{c[3]}" for c in DELTA_SHAPES])
def test_gated_delta(backend, n, Hk, Hv, S, n_slot, slot):
    def l2(a):  # q and k arrive L2-normed (delta_net.cpp)
        a = a.reshape(n, -1, S)
        return (a / np.linalg.norm(a, axis=2, keepdims=True)).reshape(n, -1).astype(np.float32)

    q, k = l2(rng.standard_normal((n, Hk * S))), l2(rng.standard_normal((n, Hk * S)))
    v = rng.standard_normal((n, Hv * S)).astype(np.float32)
    g = -rng.uniform(0.01, 1.0, (n, Hv)).astype(np.float32)
    beta = rng.uniform(0.0, 1.0, (n, Hv)).astype(np.float32)
    state = (0.3 * rng.standard_normal((n_slot, Hv, S, S))).astype(np.float32)
    slot = np.array(slot, dtype=np.int32)
    out, st = E.backend_gated_delta(backend, q, k, v, g, beta, state, slot, Hk)
    rout, rst = delta_ref(q, k, v, g, beta, state, slot, Hk)
    np.testing.assert_allclose(out, rout, rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(st, rst, rtol=1e-4, atol=2e-5)
    if backend != "cpu":
        co, cst = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk)
        np.testing.assert_allclose(out, co, rtol=0, atol=1e-5)
        np.testing.assert_allclose(st, cst, rtol=0, atol=1e-5)


# (n rows, heads, head size, state size, groups, state slots, each row's slot): several
# sequences interleaved, one row, heads x rows not a multiple of the 64-wide workgroups,
# Granite 4.0-H's state size (128), one group for all heads
SCAN_SHAPES = [(7, 4, 8, 16, 2, 3, [0, 2, 0, 1, 2, 2, 0]), (1, 2, 16, 8, 1, 1, [0]),
               (5, 3, 5, 7, 3, 2, [1, 0, 1, 1, 0]), (4, 8, 16, 128, 1, 2, [1, 1, 0, 1]),
               (3, 6, 32, 64, 2, 1, [0, 0, 0])]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("with_d", [True, False])
@pytest.mark.parametrize("n,H,P,Ns,G,n_slot,slot", SCAN_SHAPES,
                         ids=[f"n{c[0]}-H{c[1]}-P{c[2]}-N{c[3]}-G{c[4]}" for c in SCAN_SHAPES])
def test_ssm_scan(backend, with_d, n, H, P, Ns, G, n_slot, slot):
    x = rng.standard_normal((n, H * P)).astype(np.float32)
    dt = rng.standard_normal((n, H)).astype(np.float32)
    dt[0, 0] = 25.0  # past the softplus threshold
    if n > 1:
        dt[1, -1] = -30.0  # far below it
    A = -rng.uniform(0.05, 1.0, H).astype(np.float32)
    B = rng.standard_normal((n, G * Ns)).astype(np.float32)
    C = rng.standard_normal((n, G * Ns)).astype(np.float32)
    D = (1 + 0.2 * rng.standard_normal(H)).astype(np.float32) if with_d else None
    state = rng.standard_normal((n_slot, H, P, Ns)).astype(np.float32)
    slot = np.array(slot, dtype=np.int32)
    y, st = E.backend_ssm_scan(backend, x, dt, A, B, C, D, state, slot, G)
    ry, rst, y_mag, st_mag = scan_ref(x, dt, A, B, C, D, state, slot, G, magnitudes=True)
    # float rounding scales with the sum of the terms' sizes, not with the result (which
    # may cancel): within 2e-6 of that sum (about 30 roundings of its largest term)
    assert np.all(np.abs(y - ry) <= 2e-6 * y_mag + 1e-6)
    assert np.all(np.abs(st - rst) <= 2e-6 * st_mag + 1e-6)
    if backend != "cpu":
        cy, cst = E.backend_ssm_scan("cpu", x, dt, A, B, C, D, state, slot, G)
        assert np.all(np.abs(y - cy) <= 2e-6 * y_mag + 1e-6)
        assert np.all(np.abs(st - cst) <= 2e-6 * st_mag + 1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="not compiled in"):
        E.backend_row_op("cuda", "scale", Y, f=2.0)
    with pytest.raises(ValueError, match="unknown row op"):
        E.backend_row_op("cpu", "frobnicate", Y)
    with pytest.raises(ValueError):
        E.backend_row_op("cpu", "add", Y)  # no x
    with pytest.raises(ValueError):
        E.backend_row_op("cpu", "add", Y, x=X[:, :5])
    with pytest.raises(ValueError):
        E.backend_row_op("cpu", "hadamard", Y, a=48)
    with pytest.raises(ValueError, match="rows, groups"):
        E.backend_row_op("cpu", "weighted_sum", Y, x=XG, w=WG[:, :2], groups=3)
    with pytest.raises(ValueError):
        E.backend_row_op("cpu", "swiglu_oai", Y, f=7.0, f2=1.702)  # no x
    with pytest.raises(ValueError):
        E.backend_row_op("cpu", "rope", Y, x=rope_tables([0] * N, 30), groups=4, a=30 + 1)
    with pytest.raises(ValueError):
        E.backend_get_rows("cpu", E.quantize(Y, "F32"), "F32", N, COLS, [N])
    with pytest.raises(ValueError):
        E.backend_matmul("cpu", E.quantize(Y, "F32"), "F32", N + 1, COLS, X)
