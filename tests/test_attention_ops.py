"""The attention op (_engine.ops.attention) on both paths, explicit softmax and
flash, against a plain numpy reference: odd head sizes, GQA ratios, cell
counts that are not a multiple of the flash tile, every KV cache type, masks
(causal, sliding window, two sequences, rows that see nothing) and
soft-capping. The reference takes the cache as the kernels see it (keys and
values dequantized, queries rounded to the keys' dot-product format) and
computes in float64, so the tolerances only cover the kernels' own rounding.

Every test takes the `backend` fixture: a second backend (Vulkan) runs the
same checks by adding itself there. The flash path's invariances (thread
count, grouping of rows into blocks) are checked bit for bit."""
from __future__ import annotations

import functools
import zlib

import numpy as np
import pytest

from llamapy import _engine as E

FLOAT_TYPES = ["F32", "F16", "BF16"]
QUANT_TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL"]
PATHS = ["explicit", "flash"]


@pytest.fixture(params=E.backends())
def backend(request):
    """Runs the attention op on one compiled backend (cpu; vulkan in a Vulkan build)."""
    return functools.partial(E.ops.attention, backend=request.param)


def cache_rows(x: np.ndarray, t: str):
    """(n_cells, n_head_kv * d) floats as cache rows of type t: (bytes, what the kernels read back)."""
    raw = np.ascontiguousarray(np.asarray(E.quantize(x.astype(np.float32), t)).view(np.uint8).reshape(len(x), -1))
    return raw, np.asarray(E.dequantize(raw, t, list(x.shape)), dtype=np.float64)


def queries_as_seen(q: np.ndarray, type_k: str) -> np.ndarray:
    """The queries rounded to the keys' dot-product format (F16 / BF16 / Q8_0 / Q8_1)."""
    if type_k == "F32":
        return q.astype(np.float64)
    fmt = type_k if type_k in ("F16", "BF16") else E.type_info(type_k)["vec_dot_type"]
    flat = q.reshape(-1, q.shape[-1]).astype(np.float32)
    back = np.asarray(E.dequantize(np.asarray(E.quantize(flat, fmt)), fmt, list(flat.shape)))
    return back.reshape(q.shape).astype(np.float64)


def reference(q, k, v, visible, n_head_kv, scale=1.0, softcap=0.0, sinks=None):
    n_tok, n_head, _ = q.shape
    g = n_head // n_head_kv
    kh = k.reshape(len(k), n_head_kv, -1)
    vh = v.reshape(len(v), n_head_kv, -1)
    out = np.zeros((n_tok, n_head, vh.shape[2]))
    for t in range(n_tok):
        idx = np.flatnonzero(visible[t])
        if len(idx) == 0:
            continue
        for h in range(n_head):
            s = kh[idx, h // g] @ q[t, h]
            if softcap > 0:
                s = np.tanh(s / softcap) * softcap
            s = s * scale
            m = s.max() if sinks is None else max(s.max(), sinks[h])
            p = np.exp(s - m)
            total = p.sum() + (0.0 if sinks is None else np.exp(sinks[h] - m))
            out[t, h] = (p / total) @ vh[idx, h // g]
    return out


def causal(n_tok, n_cells, n_past=None, window=0):
    """Rows at positions n_past .. n_past+n_tok-1 over cells at positions 0 .. n_cells-1."""
    n_past = n_cells - n_tok if n_past is None else n_past
    pos = np.arange(n_cells)
    vis = np.zeros((n_tok, n_cells), bool)
    for t in range(n_tok):
        p = n_past + t
        vis[t] = pos <= p
        if window:
            vis[t] &= pos > p - window
    return vis


def two_sequences(n_tok, n_cells):
    """Cells alternate between sequences 0 and 1 (positions j // 2); rows alternate too."""
    seq = np.arange(n_cells) % 2
    pos = np.arange(n_cells) // 2
    vis = np.zeros((n_tok, n_cells), bool)
    for t in range(n_tok):
        s, p = t % 2, (n_cells // 2) - n_tok // 2 + t // 2
        vis[t] = (seq == s) & (pos <= p)
    return vis


def case(rng, n_tok, n_head, n_head_kv, dk, dv, n_cells, type_k="F16", type_v="F16"):
    q = rng.standard_normal((n_tok, n_head, dk)).astype(np.float32)
    kx = rng.standard_normal((n_cells, n_head_kv * dk)).astype(np.float32)
    vx = rng.standard_normal((n_cells, n_head_kv * dv)).astype(np.float32)
    k_raw, k_seen = cache_rows(kx, type_k)
    v_raw, v_seen = cache_rows(vx, type_v)
    return q, k_raw, k_seen, v_raw, v_seen


def tolerance(path, type_k, type_v):
    # The explicit path rounds the softmax weights to F16 / BF16 against such
    # values (as llama.cpp's non-flash path); flash keeps them in F32.
    if path == "explicit" and type_v == "F16":
        return 2e-3
    if path == "explicit" and type_v == "BF16":
        return 1.5e-2
    # Flash takes q·k from the type's vec_dot: against Q4_1 / Q5_1 keys that
    # uses the Q8_1 block sums, stored in F16 (the reference multiplies the
    # dequantized queries instead): up to ~1.4e-3 over random draws (1e-3 was
    # passed by 99% of them), where a wrong kernel is off by 1e-1 or more.
    if path == "flash" and type_k in ("Q4_1", "Q5_1"):
        return 2e-3
    return 2e-5


def check(backend, path, q, k_raw, k_seen, v_raw, v_seen, vis, n_head_kv, type_k, type_v, scale=0.125, softcap=0.0,
          n_threads=2):
    got = backend(q, k_raw, v_raw, type_k, type_v, n_head_kv, vis, path=path, scale=scale, softcap=softcap,
                  n_threads=n_threads)
    ref = reference(queries_as_seen(q, type_k), k_seen, v_seen, vis, n_head_kv, scale, softcap)
    assert got.shape == ref.shape
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err < tolerance(path, type_k, type_v), err
    return got, ref


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("type_k,type_v", [(t, t) for t in FLOAT_TYPES + QUANT_TYPES]
                         + [("Q8_0", "Q4_0"), ("F16", "Q8_0"), ("Q4_1", "BF16"), ("F32", "F16")])
def test_every_cache_type(backend, path, type_k, type_v):
    # A seed fixed by the names (Python's str hash changes per process: the data did too).
    rng = np.random.default_rng(zlib.crc32(f"{type_k}/{type_v}".encode()))
    n_tok, n_cells = 7, 203
    q, kr, ks, vr, vs = case(rng, n_tok, 8, 2, 64, 64, n_cells, type_k, type_v)
    vis = causal(n_tok, n_cells)
    vis[3] = False  # a row that sees nothing gets zeros
    got, _ = check(backend, path, q, kr, ks, vr, vs, vis, 2, type_k, type_v)
    assert not got[3].any()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dk,dv,n_tok,gqa,n_cells", [
    (64, 64, 1, 1, 1), (64, 64, 2, 2, 63), (80, 80, 5, 2, 65), (128, 128, 37, 4, 300), (256, 256, 3, 8, 129),
    (256, 256, 1, 4, 1000), (40, 24, 9, 2, 97), (17, 33, 4, 1, 70), (96, 72, 13, 3, 257),
])
def test_shapes(backend, path, dk, dv, n_tok, gqa, n_cells):
    rng = np.random.default_rng(dk * 1000 + n_cells)
    n_head_kv = 2
    q, kr, ks, vr, vs = case(rng, n_tok, gqa * n_head_kv, n_head_kv, dk, dv, n_cells)
    check(backend, path, q, kr, ks, vr, vs, causal(n_tok, n_cells), n_head_kv, "F16", "F16")


def masks(kind, n_tok, n_cells, rng):
    if kind == "causal":
        return causal(n_tok, n_cells)
    if kind == "window":
        return causal(n_tok, n_cells, window=37)
    if kind == "two_sequences":
        return two_sequences(n_tok, n_cells)
    if kind == "empty_rows":
        vis = causal(n_tok, n_cells)
        vis[::3] = False
        return vis
    if kind == "nothing":
        return np.zeros((n_tok, n_cells), bool)
    if kind == "scattered":  # holes everywhere, rows in no order
        return rng.random((n_tok, n_cells)) < 0.3
    raise AssertionError(kind)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", ["causal", "window", "two_sequences", "empty_rows", "nothing", "scattered"])
@pytest.mark.parametrize("n_tok", [1, 6, 19])
def test_masks(backend, path, kind, n_tok):
    rng = np.random.default_rng(n_tok)
    n_cells = 333
    q, kr, ks, vr, vs = case(rng, n_tok, 4, 1, 64, 64, n_cells)
    vis = masks(kind, n_tok, n_cells, rng)
    got, _ = check(backend, path, q, kr, ks, vr, vs, vis, 1, "F16", "F16")
    assert not got[~vis.any(axis=1)].any()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("type_kv", ["F16", "Q8_0"])
def test_softcap(backend, path, type_kv):
    rng = np.random.default_rng(5)
    n_tok, n_cells = 5, 150
    q, kr, ks, vr, vs = case(rng, n_tok, 4, 2, 64, 64, n_cells, type_kv, type_kv)
    q *= 4  # scores large enough that the cap matters
    got, _ = check(backend, path, q, kr, ks, vr, vs, causal(n_tok, n_cells), 2, type_kv, type_kv, scale=0.5,
                   softcap=3.0)
    uncapped = backend(q, kr, vr, type_kv, type_kv, 2, causal(n_tok, n_cells), path=path, scale=0.5)
    assert np.abs(uncapped - got).max() > 0.05


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("n_tok,n_cells", [(1, 40), (6, 333), (3, 1000)])
def test_sinks(backend, path, n_tok, n_cells):
    """gpt-oss's attention sinks: one more logit per head in the softmax, without
    a value; large sinks take most of the weight, the max moves to the sink."""
    rng = np.random.default_rng(n_cells)
    q, kr, ks, vr, vs = case(rng, n_tok, 8, 2, 64, 64, n_cells)
    vis = causal(n_tok, n_cells, window=128 if n_cells > 500 else 0)
    sinks = np.array([-3.0, 0.0, 1.5, 4.0, 12.0, -30.0, 2.0, 0.5], np.float32)
    got = backend(q, kr, vr, "F16", "F16", 2, vis, path=path, scale=0.125, n_threads=2, sinks=sinks)
    ref = reference(queries_as_seen(q, "F16"), ks, vs, vis, 2, 0.125, sinks=sinks.astype(np.float64))
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err < tolerance(path, "F16", "F16"), err
    plain = backend(q, kr, vr, "F16", "F16", 2, vis, path=path, scale=0.125, n_threads=2)
    assert np.abs(plain[:, 4] - got[:, 4]).max() > 0.1 * np.abs(plain[:, 4]).max()  # the sink of 12 matters


def test_the_check_can_fail(backend):
    # The reference notices a kernel that ignored the mask.
    rng = np.random.default_rng(9)
    q, kr, ks, vr, vs = case(rng, 4, 4, 1, 64, 64, 100)
    vis = causal(4, 100)
    got = backend(q, kr, vr, "F16", "F16", 1, np.ones_like(vis), path="flash", scale=0.125)
    ref = reference(queries_as_seen(q, "F16"), ks, vs, vis, 1, 0.125)
    assert np.abs(got - ref).max() / np.abs(ref).max() > 1e-2


@pytest.mark.parametrize("type_kv,n_heads", [("F16", 8), ("F32", 8), ("BF16", 8), ("Q8_0", 8), ("Q4_1", 8),
                                             ("F16", 4), ("F16", 6), ("F32", 4)])
def test_flash_does_not_depend_on_threads_or_row_blocks(backend, type_kv, n_heads):
    # n_heads / 2 key heads: 4 queries a row (a row alone and a block both
    # take the 4-query key-dot kernels), 2 (a row alone takes the 2-query
    # ones, a block of 8 rows the 4-query ones) or 3 (neither).
    rng = np.random.default_rng(11)
    n_tok, n_cells = 21, 1500  # several chunks: the split-K path with more threads than blocks
    q, kr, _, vr, _ = case(rng, n_tok, n_heads, 2, 64, 64, n_cells, type_kv, type_kv)
    vis = causal(n_tok, n_cells, window=900)
    vis[4] = False
    run = lambda q_, vis_, th: backend(q_, kr, vr, type_kv, type_kv, 2, vis_, path="flash", scale=0.125,
                                       n_threads=th)
    full = run(q, vis, 1)
    for th in (2, 3, 8):
        np.testing.assert_array_equal(run(q, vis, th), full)
    # Rows alone (one row: split-K over the threads) and in other groupings.
    for t in (0, 5, 20):
        for th in (1, 4):
            np.testing.assert_array_equal(run(q[t:t + 1], vis[t:t + 1], th)[0], full[t])
    np.testing.assert_array_equal(run(q[3:16], vis[3:16], 2), full[3:16])
    np.testing.assert_array_equal(run(q[3:9], vis[3:9], 8), full[3:9])  # several blocks split over threads
    np.testing.assert_array_equal(run(q[::-1].copy(), vis[::-1].copy(), 2), full[::-1])


@pytest.mark.parametrize("type_kv", ["F16", "Q8_0"])
def test_flash_split_with_more_key_heads_than_a_group(backend, type_kv):
    # Token generation's split tasks take the key heads in groups of 8
    # (kFlashGroup): 10 key heads make a full group and a partial one. A row
    # alone (split over the threads) equals the row inside a block, and the
    # reference.
    rng = np.random.default_rng(23)
    n_tok, n_cells, n_kv = 5, 700, 10
    q, kr, ks, vr, vs = case(rng, n_tok, 2 * n_kv, n_kv, 32, 32, n_cells, type_kv, type_kv)
    vis = causal(n_tok, n_cells)
    full, _ = check(backend, "flash", q, kr, ks, vr, vs, vis, n_kv, type_kv, type_kv, n_threads=1)
    run = lambda q_, vis_, th: backend(q_, kr, vr, type_kv, type_kv, n_kv, vis_, path="flash", scale=0.125,
                                       n_threads=th)
    for t in (0, 4):
        for th in (1, 2, 3):
            np.testing.assert_array_equal(run(q[t:t + 1], vis[t:t + 1], th)[0], full[t])


@pytest.mark.parametrize("type_kv", ["F16", "Q8_0"])
def test_flash_grouped_blocks(backend, type_kv):
    # A long prompt over many cells: blocks share tasks in groups that walk
    # the chunks together (one thread: 8 blocks a task; 2 threads: 5; a lone
    # row: none). Every row's result stays bit-identical to the row alone and
    # matches the reference.
    rng = np.random.default_rng(17)
    n_tok, n_cells = 160, 1700
    q, kr, ks, vr, vs = case(rng, n_tok, 8, 2, 64, 64, n_cells, type_kv, type_kv)
    vis = causal(n_tok, n_cells, window=1300)
    vis[7] = False  # a row that sees nothing, inside a group
    vis[40:44] = causal(4, n_cells, n_past=300)  # a block that sees only the start
    full, _ = check(backend, "flash", q, kr, ks, vr, vs, vis, 2, type_kv, type_kv, n_threads=1)
    np.testing.assert_array_equal(check(backend, "flash", q, kr, ks, vr, vs, vis, 2, type_kv, type_kv)[0], full)
    run = lambda q_, vis_, th: backend(q_, kr, vr, type_kv, type_kv, 2, vis_, path="flash", scale=0.125,
                                       n_threads=th)
    for t in (0, 7, 41, 100, 159):
        np.testing.assert_array_equal(run(q[t:t + 1], vis[t:t + 1], 2)[0], full[t])
    np.testing.assert_array_equal(run(q[37:133], vis[37:133], 2), full[37:133])


def test_explicit_path_uses_positions_and_flash_cell_order(backend):
    # The explicit path takes cells in position order (cell_pos): permuting
    # the cells with their positions changes nothing. The flash path takes
    # them in cell order: the same permutation changes only rounding.
    rng = np.random.default_rng(13)
    n_tok, n_cells = 3, 200
    q, kr, _, vr, _ = case(rng, n_tok, 4, 1, 64, 64, n_cells)
    vis = causal(n_tok, n_cells)
    perm = rng.permutation(n_cells)
    pos = np.arange(n_cells, dtype=np.int32)
    # (The Vulkan backend sums in cell order on both paths: rounding only there.)
    in_position_order = backend.keywords["backend"] == "cpu"
    for path in PATHS:
        a = backend(q, kr, vr, "F16", "F16", 1, vis, path=path, scale=0.125, cell_pos=pos)
        b = backend(q, kr[perm], vr[perm], "F16", "F16", 1, vis[:, perm], path=path, scale=0.125, cell_pos=pos[perm])
        if path == "explicit" and in_position_order:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * np.abs(a).max())


def test_flash_scratch_does_not_grow_with_cells():
    args = dict(n_threads=2, n_gqa=4, head_dim_k=256, head_dim_v=256)
    flash = [E.ops.attention_scratch_bytes("flash", n_cells=n, **args) for n in (512, 8192, 131072)]
    explicit = [E.ops.attention_scratch_bytes("explicit", n_cells=n, **args) for n in (512, 8192)]
    assert flash[0] == flash[1] == flash[2] > 0
    # Token generation's split partials are reserved for every key head up
    # front (a task does all of them), so no call grows them later.
    many = [E.ops.attention_scratch_bytes("flash", n_cells=n, n_head_kv=8, **args) for n in (512, 131072)]
    assert many[0] == many[1] > flash[0]
    assert explicit[1] > explicit[0] > 0


def test_bad_arguments_are_value_errors(backend):
    rng = np.random.default_rng(1)
    q, kr, _, vr, _ = case(rng, 2, 4, 2, 64, 64, 10)
    vis = np.ones((2, 10), bool)
    with pytest.raises(ValueError, match="path"):
        backend(q, kr, vr, "F16", "F16", 2, vis, path="fast")
    with pytest.raises(ValueError, match="type_k"):
        backend(q, kr, vr, "Q4_K", "F16", 2, vis)
    with pytest.raises(ValueError, match="multiple of n_head_kv"):
        backend(q, kr, vr, "F16", "F16", 3, vis)
    with pytest.raises(ValueError, match="visible"):
        backend(q, kr, vr, "F16", "F16", 2, vis[:, :5])
    with pytest.raises(ValueError, match="head"):
        backend(q[:, :, :32].copy(), kr, vr, "F16", "F16", 2, vis)
    with pytest.raises(ValueError, match="Q8_0"):
        backend(q[:, :, :48].copy(), kr[:, :192].copy(), vr, "Q8_0", "F16", 2, vis)
