"""Mamba-2's selective scan (backend.h ssm_scan) on its own, against a numpy statement of
llama.cpp's semantics (ggml's ssm_scan with a scalar decay per head): per head h of group
g = h // (H / G), dt = softplus(dt_in) (identity past 20), S = exp(dt A[h]) S + dt x B_gᵀ,
y = S C_g + D[h] x, the state (n_head, head_dim, d_state) per slot.

Rows of several sequences interleave in one call, each on its own state slot; a batch split
in two calls (the state carried) equals the whole; one and two threads agree bit for bit.
A GPU backend's version (vulkan/shaders/ssm_scan.comp) is held against this statement and the
CPU's results by the cross-backend op test (tests/test_backend_ops.py), and its split batches
here.

Run once per SIMD level (tools/level_tests.txt): the scan the CPU backend runs is the fused
AVX2 / AVX-512 / NEON form where the level has it, the scalar reference otherwise
(cpu/delta_net.cpp); both within rounding of this statement."""

from __future__ import annotations

import numpy as np
import pytest

from llamapy import _engine as E

GPU_BACKENDS = [b for b in E.backends() if b != "cpu"]


def scan_ref(x, dt, A, B, C, D, state, slot, n_group, magnitudes=False):
    """(y, states after); with magnitudes, also the same sums over the terms' absolute values
    (the scale of float rounding in each result, for comparing two float implementations)."""
    n, H, P, N = x.shape[0], state.shape[1], state.shape[2], state.shape[3]
    st = state.astype(np.float64).copy()
    st_mag = np.abs(st)
    y = np.zeros((n, H * P))
    y_mag = np.zeros((n, H * P))
    for t in range(n):
        for h in range(H):
            g = h // (H // n_group)
            d = float(dt[t, h])
            sp = d if d > 20 else np.log1p(np.exp(d))
            xh = x[t, h * P:(h + 1) * P].astype(np.float64)
            Bg, Cg = B[t, g * N:(g + 1) * N], C[t, g * N:(g + 1) * N]
            decay, upd = np.exp(sp * A[h]), np.outer(xh * sp, Bg)
            S = st[slot[t], h] * decay + upd
            st_mag[slot[t], h] = st_mag[slot[t], h] * decay + np.abs(upd)
            st[slot[t], h] = S
            skip = 0 if D is None else D[h] * xh
            y[t, h * P:(h + 1) * P] = S @ Cg + skip
            y_mag[t, h * P:(h + 1) * P] = st_mag[slot[t], h] @ np.abs(Cg) + np.abs(skip)
    return (y, st, y_mag, st_mag) if magnitudes else (y, st)


def scan_inputs(rng, n=7, H=4, P=8, N=16, G=2, n_slot=3):
    x = rng.standard_normal((n, H * P)).astype(np.float32)
    dt = rng.standard_normal((n, H)).astype(np.float32)
    dt[0, 0], dt[1, 1] = 25.0, -30.0  # past the softplus threshold, and far below it
    A = -rng.uniform(0.05, 1.0, H).astype(np.float32)
    B = rng.standard_normal((n, G * N)).astype(np.float32)
    C = rng.standard_normal((n, G * N)).astype(np.float32)
    D = (1 + 0.2 * rng.standard_normal(H)).astype(np.float32)
    state = rng.standard_normal((n_slot, H, P, N)).astype(np.float32)
    slot = np.array([0, 2, 0, 1, 2, 2, 0][:n], dtype=np.int32)
    return x, dt, A, B, C, D, state, slot, G


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("with_d", [True, False])
def test_ssm_scan_matches_reference(threads, with_d):
    rng = np.random.default_rng(8)
    x, dt, A, B, C, D, state, slot, G = scan_inputs(rng)
    D = D if with_d else None
    y, st = E.backend_ssm_scan("cpu", x, dt, A, B, C, D, state, slot, G, n_threads=threads)
    ry, rst, y_mag, st_mag = scan_ref(x, dt, A, B, C, D, state, slot, G, magnitudes=True)
    # within float rounding of the terms' sizes (the results may cancel), at every SIMD level
    assert np.all(np.abs(y - ry) <= 2e-6 * y_mag + 1e-6)
    assert np.all(np.abs(st - rst) <= 2e-6 * st_mag + 1e-6)
    y1, s1 = E.backend_ssm_scan("cpu", x, dt, A, B, C, D, state, slot, G, n_threads=1)
    np.testing.assert_array_equal(y, y1)
    np.testing.assert_array_equal(st, s1)


def test_ssm_scan_heads_read_their_group():
    """With 4 heads in 2 groups, changing group 1's B changes heads 2 and 3 only."""
    rng = np.random.default_rng(9)
    x, dt, A, B, C, D, state, slot, G = scan_inputs(rng)
    P, N = state.shape[2], state.shape[3]
    y, _ = E.backend_ssm_scan("cpu", x, dt, A, B, C, D, state, slot, G)
    B2 = B.copy()
    B2[:, N:] = np.roll(B2[:, N:], 1, axis=1)
    y2, _ = E.backend_ssm_scan("cpu", x, dt, A, B2, C, D, state, slot, G)
    changed = [bool(np.any(y[:, h * P:(h + 1) * P] != y2[:, h * P:(h + 1) * P])) for h in range(4)]
    assert changed == [False, False, True, True]


def test_ssm_scan_split_batch_carries_the_state():
    rng = np.random.default_rng(10)
    x, dt, A, B, C, D, state, slot, G = scan_inputs(rng)
    y, st = E.backend_ssm_scan("cpu", x, dt, A, B, C, D, state, slot, G)
    ya, sa = E.backend_ssm_scan("cpu", x[:3], dt[:3], A, B[:3], C[:3], D, state, slot[:3], G)
    yb, sb = E.backend_ssm_scan("cpu", x[3:], dt[3:], A, B[3:], C[3:], D, sa, slot[3:], G)
    np.testing.assert_array_equal(np.concatenate([ya, yb]), y)
    np.testing.assert_array_equal(sb, st)


def test_ssm_scan_rejects_bad_arguments():
    rng = np.random.default_rng(11)
    x, dt, A, B, C, D, state, slot, G = scan_inputs(rng)
    with pytest.raises(ValueError, match="shapes"):
        E.backend_ssm_scan("cpu", x, dt, A, B, C, D, state, slot, 3)  # 4 heads do not split into 3 groups
    with pytest.raises(ValueError, match="slot"):
        E.backend_ssm_scan("cpu", x, dt, A, B, C, D, state, slot + 3, G)
    with pytest.raises(ValueError, match="D must"):
        E.backend_ssm_scan("cpu", x, dt, A, B, C, D[:3], state, slot, G)


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_split_batches_carry_the_state(backend):
    """On a GPU backend too: a batch in two calls, the state carried (through host memory
    here) between them, equals the whole, and the whole equals the CPU's."""
    if not E.gpu_devices():
        pytest.skip("no GPU device")
    rng = np.random.default_rng(12)
    x, dt, A, B, C, D, state, slot, G = scan_inputs(rng)
    y, st = E.backend_ssm_scan(backend, x, dt, A, B, C, D, state, slot, G)
    ya, sa = E.backend_ssm_scan(backend, x[:3], dt[:3], A, B[:3], C[:3], D, state, slot[:3], G)
    yb, sb = E.backend_ssm_scan(backend, x[3:], dt[3:], A, B[3:], C[3:], D, sa, slot[3:], G)
    np.testing.assert_array_equal(np.concatenate([ya, yb]), y)
    np.testing.assert_array_equal(sb, st)
    cy, cst = E.backend_ssm_scan("cpu", x, dt, A, B, C, D, state, slot, G)
    np.testing.assert_allclose(y, cy, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(st, cst, rtol=1e-5, atol=1e-5)
