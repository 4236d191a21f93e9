"""The recurrent layers' ops (backend.h ssm_conv / gated_delta, and the row ops sigmoid_mul,
softplus_mul, scale_by) on their own, against numpy statements of llama.cpp's semantics
(ggml's ssm_conv and gated_delta_net: the state layout S[i][j] at [j][i], value head h
reading key head h % n_head_k, decay then delta update then read-out).

Rows of several sequences interleave in one call, each on its own state slot; a batch split
in two calls (the state carried) equals the whole; one and two threads agree bit for bit.
The chunked form of the gated delta rule (cpu/delta_chunked.cpp: what long runs of one
sequence take) is held against the reference loops (gated_delta_ref) over chunk-boundary
lengths, mixed slots and decays from almost nothing to almost 1. Run once per SIMD level
(tools/level_tests.txt): its products are the scalar, AVX2 or AVX-512 ones by level.
A GPU backend's versions are held against these statements and the CPU's results by the
cross-backend op test (tests/test_backend_ops.py), and its split batches here."""

from __future__ import annotations

import numpy as np
import pytest

from llamapy import _engine as E

GPU_BACKENDS = [b for b in E.backends() if b != "cpu"]


def conv_ref(x, w, state, slot):
    """y[t, c] = sum_i w[c, i] * window[i], window = the slot's tail then x[t, c]."""
    st = state.astype(np.float64).copy()
    y = np.zeros(x.shape, dtype=np.float64)
    for t in range(x.shape[0]):
        s = slot[t]
        win = np.concatenate([st[s], x[t][:, None]], axis=1)  # (C, d)
        y[t] = (win * w).sum(axis=1)
        st[s] = win[:, 1:]
    return y, st


def delta_ref(q, k, v, g, beta, state, slot, n_head_k):
    n, Hv, S = v.shape[0], state.shape[1], state.shape[2]
    st = state.astype(np.float64).copy()  # st[s, h, j, i] = S[i][j]
    out = np.zeros((n, Hv * S))
    for t in range(n):
        for h in range(Hv):
            hk = h % n_head_k
            qv, kv = q[t, hk * S:(hk + 1) * S], k[t, hk * S:(hk + 1) * S]
            M = st[slot[t], h].T * np.exp(g[t, h])  # M[i, j] = S[i][j]
            d = (v[t, h * S:(h + 1) * S] - M.T @ kv) * beta[t, h]
            M = M + np.outer(kv, d)
            out[t, h * S:(h + 1) * S] = (M.T @ qv) / np.sqrt(S)
            st[slot[t], h] = M.T
    return out, st


def inputs(rng, n=7, C=24, d=4, n_slot=3):
    x = rng.standard_normal((n, C)).astype(np.float32)
    w = rng.standard_normal((C, d)).astype(np.float32)
    state = rng.standard_normal((n_slot, C, d - 1)).astype(np.float32)
    slot = np.array([0, 2, 0, 1, 2, 2, 0][:n], dtype=np.int32)
    return x, w, state, slot


def delta_inputs(rng, n=6, Hk=2, Hv=4, S=8, n_slot=2):
    def l2(a):
        a = a.reshape(n, -1, S)
        return (a / np.linalg.norm(a, axis=2, keepdims=True)).reshape(n, -1).astype(np.float32)

    q = l2(rng.standard_normal((n, Hk * S)))
    k = l2(rng.standard_normal((n, Hk * S)))
    v = rng.standard_normal((n, Hv * S)).astype(np.float32)
    g = -rng.uniform(0.01, 1.0, (n, Hv)).astype(np.float32)
    beta = rng.uniform(0.0, 1.0, (n, Hv)).astype(np.float32)
    state = (0.3 * rng.standard_normal((n_slot, Hv, S, S))).astype(np.float32)
    slot = np.array([1, 0, 1, 1, 0, 1][:n], dtype=np.int32)
    return q, k, v, g, beta, state, slot, Hk


@pytest.mark.parametrize("threads", [1, 2])
def test_ssm_conv_matches_reference(threads):
    rng = np.random.default_rng(1)
    x, w, state, slot = inputs(rng)
    y, st = E.backend_ssm_conv("cpu", x, w, state, slot, n_threads=threads)
    ry, rst = conv_ref(x, w, state, slot)
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(st, rst.astype(np.float32))  # the tails are copies
    y1, _ = E.backend_ssm_conv("cpu", x, w, state, slot, n_threads=1)
    np.testing.assert_array_equal(y, y1)


def test_ssm_conv_split_batch_carries_the_state():
    rng = np.random.default_rng(2)
    x, w, state, slot = inputs(rng)
    y, st = E.backend_ssm_conv("cpu", x, w, state, slot)
    ya, sa = E.backend_ssm_conv("cpu", x[:3], w, state, slot[:3])
    yb, sb = E.backend_ssm_conv("cpu", x[3:], w, sa, slot[3:])
    np.testing.assert_array_equal(np.concatenate([ya, yb]), y)
    np.testing.assert_array_equal(sb, st)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("S", [8, 32, 128])  # 8: the plain loops; multiples of 16 take the SIMD ones
def test_gated_delta_matches_reference(threads, S):
    rng = np.random.default_rng(3)
    q, k, v, g, beta, state, slot, Hk = delta_inputs(rng, S=S)
    out, st = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk, n_threads=threads)
    rout, rst = delta_ref(q, k, v, g, beta, state, slot, Hk)
    np.testing.assert_allclose(out, rout, rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(st, rst, rtol=1e-4, atol=2e-5)
    o1, s1 = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk, n_threads=1)
    np.testing.assert_array_equal(out, o1)
    np.testing.assert_array_equal(st, s1)


def test_gated_delta_value_heads_read_key_head_h_mod_hk():
    """Changing key head 1 changes value heads 1 and 3 (h % 2 == 1) only."""
    rng = np.random.default_rng(4)
    q, k, v, g, beta, state, slot, Hk = delta_inputs(rng)
    S = state.shape[2]
    out, _ = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk)
    k2 = k.copy()
    k2[:, S:2 * S] = np.roll(k2[:, S:2 * S], 1, axis=1)
    out2, _ = E.backend_gated_delta("cpu", q, k2, v, g, beta, state, slot, Hk)
    changed = [bool(np.any(out[:, h * S:(h + 1) * S] != out2[:, h * S:(h + 1) * S])) for h in range(4)]
    assert changed == [False, True, False, True]


def test_gated_delta_split_batch_carries_the_state():
    rng = np.random.default_rng(5)
    q, k, v, g, beta, state, slot, Hk = delta_inputs(rng)
    out, st = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk)
    oa, sa = E.backend_gated_delta("cpu", q[:2], k[:2], v[:2], g[:2], beta[:2], state, slot[:2], Hk)
    ob, sb = E.backend_gated_delta("cpu", q[2:], k[2:], v[2:], g[2:], beta[2:], sa, slot[2:], Hk)
    np.testing.assert_array_equal(np.concatenate([oa, ob]), out)
    np.testing.assert_array_equal(sb, st)


CHUNK = 32  # the backend's chunk (delta_net.h gated_delta_plan)


def long_inputs(rng, slots, Hk=2, Hv=4, S=128, n_slot=2, g_range=(-1.0, -0.01)):
    """delta_inputs' kinds of values over rows on the given slots; g uniform in g_range."""
    n = len(slots)
    q, k, v, g, beta, state, _, _ = delta_inputs(rng, n=n, Hk=Hk, Hv=Hv, S=S, n_slot=n_slot)
    g = rng.uniform(g_range[0], g_range[1], (n, Hv)).astype(np.float32)
    return q, k, v, g, beta, state, np.array(slots, dtype=np.int32), Hk


def assert_within_rounding(out, st, rout, rst, q, Hk, what):
    """Outputs within 5e-5 of the row's head's size (its largest |value|, at least 1e-3 so
    rows read from an almost vanished state do not demand bits below rounding), states
    within 5e-5 of their head's largest |element|. Why per head: the chunked form regroups
    each head's sums (every element of a head's state is updated from all of its rows
    through the triangular solve), so its rounding scales with the head's values, not with
    each element's, which may cancel to near zero. By this measure the step form's own
    AVX2 kernel lands up to ~1e-5 from the reference on these inputs, the chunked form
    likewise."""
    n = out.shape[0]
    Hv, S = rst.shape[1], rst.shape[2]
    o, ro = out.reshape(n, Hv, S), rout.reshape(n, Hv, S)
    scale = np.maximum(np.abs(ro).max(axis=2, keepdims=True), 1e-3)
    err = np.abs(o - ro) / scale
    assert err.max() <= 5e-5, f"{what}: output off by {err.max():.2e} of its head's size"
    sscale = np.maximum(np.abs(rst).max(axis=(2, 3), keepdims=True), 1e-3)
    serr = np.abs(st - rst) / sscale
    assert serr.max() <= 5e-5, f"{what}: state off by {serr.max():.2e} of its head's size"


@pytest.mark.parametrize("n", [1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5])
def test_gated_delta_chunked_matches_reference_at_chunk_boundaries(n):
    rng = np.random.default_rng(10 + n)
    q, k, v, g, beta, state, slot, Hk = long_inputs(rng, [1] * n)
    ref = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk, kernel="ref")
    got = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk, kernel="chunked", chunk=CHUNK)
    assert_within_rounding(*got, *ref, q, Hk, f"n={n}")
    np.testing.assert_array_equal(got[1][0], state[0])  # the other slot untouched


@pytest.mark.parametrize("g_range", [(-60.0, -20.0), (-1e-4, 0.0), (-60.0, 0.0)],
                         ids=["decay-near-0", "decay-near-1", "both"])
def test_gated_delta_chunked_decays_from_nothing_to_one(g_range):
    """exp(g) from 1e-26 (the state all but gone after one row; cumulative decays underflow
    to zero within a chunk) to 1 (no decay: nothing forgotten over 3 chunks)."""
    rng = np.random.default_rng(11)
    n = 2 * CHUNK + 9
    q, k, v, g, beta, state, slot, Hk = long_inputs(rng, [0] * n, g_range=g_range)
    ref = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk, kernel="ref")
    got = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk, kernel="chunked")
    assert np.all(np.isfinite(got[0])) and np.all(np.isfinite(got[1]))
    assert_within_rounding(*got, *ref, q, Hk, str(g_range))


@pytest.mark.parametrize("S,chunk", [(5, 3), (8, 4), (16, 7), (32, 16), (128, 64)])
def test_gated_delta_chunked_mixed_slots_and_head_sizes(S, chunk):
    """Runs of two sequences interleaved (each run its own chunks), head sizes that take
    the scalar products (5), the narrow vector ones (8, 16) and the full ones, odd chunks."""
    rng = np.random.default_rng(12 + S)
    slots = [1] * (2 * chunk + 1) + [0] * 3 + [1] * (chunk + 2) + [0] * (3 * chunk) + [1]
    q, k, v, g, beta, state, slot, Hk = long_inputs(rng, slots, Hk=1, Hv=3, S=S)
    ref = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk, kernel="ref")
    got = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk, kernel="chunked", chunk=chunk)
    assert_within_rounding(*got, *ref, q, Hk, f"S={S} chunk={chunk}")
    rout, rst = delta_ref(q, k, v, g, beta, state, slot, Hk)  # and the numpy statement
    assert_within_rounding(*got, rout, rst, q, Hk, f"S={S} chunk={chunk} vs numpy")


@pytest.mark.parametrize("threads", [1, 2])
def test_gated_delta_backend_takes_the_chunked_form_for_long_runs(threads):
    """What the backend runs on a prompt-sized batch (two sequences' long runs, decode-sized
    runs between): the chunked form for the long runs (bit for bit the chunked kernel's
    first run), the step form for a run of one row (bit for bit the step kernel's row 150,
    which reads slot 1's untouched state), all within rounding of the reference, and the
    same bits on one or two threads."""
    rng = np.random.default_rng(13)
    slots = [0] * 150 + [1] + [0] + [1] * 90
    q, k, v, g, beta, state, slot, Hk = long_inputs(rng, slots)
    got = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk, n_threads=threads)
    ref = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk, kernel="ref")
    assert_within_rounding(*got, *ref, q, Hk, "backend")
    chunked = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk, kernel="chunked")
    step = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk, kernel="step")
    np.testing.assert_array_equal(got[0][:150], chunked[0][:150])
    assert not np.array_equal(got[0][:150], step[0][:150])
    np.testing.assert_array_equal(got[0][150], step[0][150])
    one = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk, n_threads=1)
    np.testing.assert_array_equal(got[0], one[0])


def test_gated_delta_kernel_and_chunk_are_checked():
    rng = np.random.default_rng(14)
    q, k, v, g, beta, state, slot, Hk = delta_inputs(rng)
    with pytest.raises(ValueError, match="kernel"):
        E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk, kernel="fast")
    for bad in (0, 257):
        with pytest.raises(ValueError, match="chunk"):
            E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk, kernel="chunked", chunk=bad)


def test_row_ops_sigmoid_softplus_scale_by():
    rng = np.random.default_rng(6)
    y = (3 * rng.standard_normal((5, 12))).astype(np.float32)
    x = rng.standard_normal((5, 12)).astype(np.float32)
    sig = lambda a: 1.0 / (1.0 + np.exp(-a.astype(np.float64)))  # noqa: E731
    np.testing.assert_allclose(E.backend_row_op("cpu", "sigmoid_mul", y, x), y * sig(x), rtol=1e-6)
    np.testing.assert_allclose(E.backend_row_op("cpu", "sigmoid_mul", y), sig(y), rtol=1e-6)
    b = rng.standard_normal(12).astype(np.float32)
    w = -rng.uniform(0.1, 2, 12).astype(np.float32)
    yy = y.copy()
    yy[0, :3] = [25.0, -30.0, 19.0]  # past ggml's softplus threshold (20) and far below it
    v = yy.astype(np.float64) + b
    ref = np.where(v > 20, v, np.log1p(np.exp(v))) * w
    np.testing.assert_allclose(E.backend_row_op("cpu", "softplus_mul", yy, w=w, b=b), ref, rtol=1e-5, atol=1e-6)
    s = rng.standard_normal((5, 1)).astype(np.float32)
    np.testing.assert_allclose(E.backend_row_op("cpu", "scale_by", y, s), y * s, rtol=1e-6)


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_split_batches_carry_the_state(backend):
    """On a GPU backend too: a batch in two calls, the state carried (through host memory
    here) between them, equals the whole, and the whole equals the CPU's."""
    if not E.gpu_devices():
        pytest.skip("no GPU device")
    rng = np.random.default_rng(8)
    x, w, state, slot = inputs(rng)
    y, st = E.backend_ssm_conv(backend, x, w, state, slot)
    ya, sa = E.backend_ssm_conv(backend, x[:3], w, state, slot[:3])
    yb, sb = E.backend_ssm_conv(backend, x[3:], w, sa, slot[3:])
    np.testing.assert_array_equal(np.concatenate([ya, yb]), y)
    np.testing.assert_array_equal(sb, st)
    np.testing.assert_array_equal(st, E.backend_ssm_conv("cpu", x, w, state, slot)[1])
    q, k, v, g, beta, state, slot, Hk = delta_inputs(rng)
    out, st = E.backend_gated_delta(backend, q, k, v, g, beta, state, slot, Hk)
    oa, sa = E.backend_gated_delta(backend, q[:2], k[:2], v[:2], g[:2], beta[:2], state, slot[:2], Hk)
    ob, sb = E.backend_gated_delta(backend, q[2:], k[2:], v[2:], g[2:], beta[2:], sa, slot[2:], Hk)
    np.testing.assert_array_equal(np.concatenate([oa, ob]), out)
    np.testing.assert_array_equal(sb, st)
    cout, cst = E.backend_gated_delta("cpu", q, k, v, g, beta, state, slot, Hk)
    np.testing.assert_allclose(out, cout, rtol=0, atol=1e-5)
    np.testing.assert_allclose(st, cst, rtol=0, atol=1e-5)
