"""The Vulkan backend (CMAKE_ARGS="-DLLAMAPY_VULKAN=ON"): the devices it reports,
and its ops against the CPU backend on every weight type it has a shader
for, at shapes with partial workgroups and tail blocks. CI runs this on Mesa's
lavapipe (a CPU Vulkan driver). The cross-backend op test
(test_backend_ops.py) runs the row ops on it too. In a build without the
backend the module is skipped: there is nothing of it to test."""
from __future__ import annotations

import numpy as np
import pytest

from llamapy import _engine as E
from quant_checks import IQ_LATTICE_TYPES, random_iq_blocks

pytestmark = pytest.mark.skipif("vulkan" not in E.backends(), reason="built without the Vulkan backend")

rng = np.random.default_rng(3)
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "MXFP4", "TQ1_0",
         "TQ2_0", "IQ4_NL", "IQ4_XS"]


def test_a_device_is_found_and_described():
    devs = E.gpu_devices()
    assert devs, f"the Vulkan backend found no device: {E.vulkan_error()}"
    for d in devs:
        assert d["backend"] == "vulkan" and d["name"] and d["type"] in ("discrete", "integrated", "virtual", "cpu",
                                                                         "other")
        assert d["memory"] > 0 and isinstance(d["fp16"], bool) and isinstance(d["int8"], bool)
    info = E.system_info()
    assert "vulkan" in info["backends"] and info["devices"] == devs


@pytest.mark.parametrize("wtype", TYPES)
@pytest.mark.parametrize("n_rows,n_cols,n", [(37, 768, 1), (37, 1280, 5), (130, 256, 70)])
def test_matmul_matches_the_cpu(wtype, n_rows, n_cols, n):
    w = (rng.standard_normal((n_rows, n_cols)) / np.sqrt(n_cols)).astype(np.float32)
    raw = E.quantize(w, wtype)
    x = rng.standard_normal((n, n_cols)).astype(np.float32)
    got = E.backend_matmul("vulkan", raw, wtype, n_rows, n_cols, x)
    cpu = E.backend_matmul("cpu", raw, wtype, n_rows, n_cols, x)
    assert got.shape == (n, n_rows)
    # same converted activations and integer block sums: only the float summation order differs
    assert np.abs(got - cpu).max() <= 2e-6 * np.abs(cpu).max()


@pytest.mark.parametrize("wtype", TYPES)
def test_matmul_rows_do_not_depend_on_the_batch(wtype):
    """The shader works on tiles of 8 tokens; a token's row is the same sum in
    the same order whatever the tile it falls in and however full that is."""
    w = (rng.standard_normal((45, 512)) / np.sqrt(512)).astype(np.float32)
    raw = E.quantize(w, wtype)
    x = rng.standard_normal((19, 512)).astype(np.float32)
    whole = E.backend_matmul("vulkan", raw, wtype, 45, 512, x)
    for lo, hi in ((0, 1), (3, 4), (9, 18), (18, 19)):
        np.testing.assert_array_equal(E.backend_matmul("vulkan", raw, wtype, 45, 512, x[lo:hi]), whole[lo:hi])


@pytest.mark.parametrize("wtype", TYPES)
def test_get_rows_matches_the_cpu(wtype):
    table = rng.standard_normal((20, 512)).astype(np.float32)
    raw = E.quantize(table, wtype)
    ids = [19, 0, 7, 7, 3]
    np.testing.assert_array_equal(E.backend_get_rows("vulkan", raw, wtype, 20, 512, ids),
                                  E.backend_get_rows("cpu", raw, wtype, 20, 512, ids))


# The grid i-quants: llamapy does not quantize to them, so the weights are random
# blocks (every one legal once its scale is finite: quant_checks.random_iq_blocks).
@pytest.mark.parametrize("wtype", IQ_LATTICE_TYPES)
def test_grid_iquants_have_shaders_and_match_the_cpu(wtype):
    assert wtype in E.vulkan_matmul_types()  # not the F16 fallback: the blocks go to the device as stored
    r = np.random.default_rng(IQ_LATTICE_TYPES.index(wtype))
    for n_rows, n_cols, n in ((37, 768, 1), (37, 1280, 5), (130, 256, 70)):
        raw = random_iq_blocks(r, wtype, n_rows * n_cols // 256).reshape(-1)
        x = r.standard_normal((n, n_cols)).astype(np.float32)
        got = E.backend_matmul("vulkan", raw, wtype, n_rows, n_cols, x)
        cpu = E.backend_matmul("cpu", raw, wtype, n_rows, n_cols, x)
        assert got.shape == (n, n_rows)
        assert np.abs(got - cpu).max() <= 2e-6 * np.abs(cpu).max(), (n_rows, n_cols, n)
    # a token's row does not depend on the tile of 8 it falls in
    raw = random_iq_blocks(r, wtype, 45 * 512 // 256).reshape(-1)
    x = r.standard_normal((19, 512)).astype(np.float32)
    whole = E.backend_matmul("vulkan", raw, wtype, 45, 512, x)
    for lo, hi in ((0, 1), (3, 4), (9, 18), (18, 19)):
        np.testing.assert_array_equal(E.backend_matmul("vulkan", raw, wtype, 45, 512, x[lo:hi]), whole[lo:hi])
    # get_rows: the CPU's dequantization, bit for bit
    table = random_iq_blocks(r, wtype, 20 * 512 // 256).reshape(-1)
    ids = [19, 0, 7, 7, 3]
    np.testing.assert_array_equal(E.backend_get_rows("vulkan", table, wtype, 20, 512, ids),
                                  E.backend_get_rows("cpu", table, wtype, 20, 512, ids))


def test_the_listed_types_have_shaders_of_their_own():
    """Their weights go to the device as stored, not dequantized to F16 rows at upload."""
    assert set(TYPES + IQ_LATTICE_TYPES) <= set(E.vulkan_matmul_types())


def test_iq4_nl_rows_of_a_few_blocks():
    """IQ4_NL's blocks of 32: rows of 3 blocks (4 lanes a row, 16 rows a workgroup), odd row
    counts, one token and a tile and a half of them."""
    for n_rows, n in ((13, 1), (29, 12)):
        w = (rng.standard_normal((n_rows, 96)) / np.sqrt(96)).astype(np.float32)
        raw = E.quantize(w, "IQ4_NL")
        x = rng.standard_normal((n, 96)).astype(np.float32)
        got = E.backend_matmul("vulkan", raw, "IQ4_NL", n_rows, 96, x)
        cpu = E.backend_matmul("cpu", raw, "IQ4_NL", n_rows, 96, x)
        assert np.abs(got - cpu).max() <= 2e-6 * np.abs(cpu).max(), (n_rows, n)


def test_rms_norm_of_long_rows_and_many_groups():
    y = rng.standard_normal((3, 4096)).astype(np.float32)
    w = rng.standard_normal(256).astype(np.float32)
    got = E.backend_row_op("vulkan", "rms_norm", y, w=w, f=1e-6, groups=16)
    cpu = E.backend_row_op("cpu", "rms_norm", y, w=w, f=1e-6, groups=16)
    np.testing.assert_allclose(got, cpu, rtol=0, atol=1e-5)


def test_types_without_a_shader_run_dequantized_to_f16():
    # Q3_K has no matmul shader: the weights go to the device as F16 and the F16
    # shader multiplies them (F16 activations instead of the CPU's Q8_K ones).
    assert "Q3_K" not in E.vulkan_matmul_types() and "Q4_K" in E.vulkan_matmul_types()
    w = E.quantize((rng.standard_normal((8, 256)) / 16).astype(np.float32), "Q3_K")
    x = rng.standard_normal((3, 256)).astype(np.float32)
    got = E.backend_matmul("vulkan", w, "Q3_K", 8, 256, x)
    cpu = E.backend_matmul("cpu", w, "Q3_K", 8, 256, x)
    assert np.abs(got - cpu).max() <= 2e-2 * np.abs(cpu).max()
    np.testing.assert_array_equal(E.backend_get_rows("vulkan", w, "Q3_K", 8, 256, [1, 7]).shape, (2, 256))


def test_what_is_missing_says_so():
    x = rng.standard_normal((2, 64)).astype(np.float32)
    x256 = rng.standard_normal((2, 256)).astype(np.float32)
    with pytest.raises(NotImplementedError, match="Q4_K"):  # not a cache type anywhere
        E.backend_kv_store("vulkan", "Q4_K", x256, [0, 1], 2)
