"""Build options: our LLAMAPY_* names, the GGML_* aliases, and loud failures
for backends we do not have or contradictory combinations.

These configure the top-level CMakeLists.txt with LLAMAPY_CHECK_OPTIONS_ONLY,
which validates the options and stops before compiling anything.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CMAKE = shutil.which("cmake")

pytestmark = pytest.mark.skipif(
    CMAKE is None or not (ROOT / "CMakeLists.txt").exists(), reason="needs cmake and the source tree"
)


def configure(tmp_path: Path, *opts: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CMAKE, "-S", str(ROOT), "-B", str(tmp_path / "b"), "-DLLAMAPY_CHECK_OPTIONS_ONLY=ON", *opts],
        capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize("opt", ["-DGGML_CUDA=on", "-DGGML_METAL=ON", "-DLLAMA_CUBLAS=on",
                                 "-DGGML_HIP=ON", "-DGGML_SYCL=ON", "-DGGML_BLAS=ON"])
def test_missing_backend_fails_loudly(tmp_path, opt):
    r = configure(tmp_path, opt)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    name = opt[2:].split("=")[0]
    assert f"{name}=" in out and "does not have" in out
    assert "LLAMAPY_NATIVE" in out  # the message lists what exists


@pytest.mark.parametrize(
    "opts, mode",
    [
        ((), "native"),
        (("-DLLAMAPY_NATIVE=ON",), "native"),
        (("-DGGML_NATIVE=ON",), "native"),
        (("-DLLAMAPY_NATIVE=OFF",), "portable (scalar kernels only)"),
        (("-DLLAMAPY_AVX2=ON",), "portable (AVX2 kernels)"),
        (("-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON"), "portable (AVX2 kernels)"),
        (("-DLLAMAPY_NATIVE=OFF", "-DLLAMAPY_AVX512=ON"), "portable (AVX2 + AVX-512 kernels)"),
        (("-DGGML_AVX512=ON",), "portable (AVX2 + AVX-512 kernels)"),
        (("-DGGML_CUDA=OFF",), "native"),
        (("-DLLAMAPY_PORTABLE=ON",), "portable (all kernel levels)"),
        (("-DGGML_CPU_ALL_VARIANTS=ON",), "portable (all kernel levels)"),
        (("-DLLAMAPY_PORTABLE=ON", "-DLLAMAPY_NATIVE=OFF", "-DLLAMAPY_AVX512=ON"), "portable (all kernel levels)"),
        (("-DLLAMAPY_PORTABLE=OFF",), "native"),
    ],
)
def test_accepted_options(tmp_path, opts, mode):
    r = configure(tmp_path, *opts)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"llamapy: CPU backend, {mode};" in r.stdout


@pytest.mark.parametrize(
    "opts, words",
    [
        (("-DLLAMAPY_NATIVE=ON", "-DLLAMAPY_AVX2=ON"), "contradictory"),
        (("-DGGML_NATIVE=ON", "-DGGML_AVX512=ON"), "contradictory"),
        (("-DLLAMAPY_AVX2=ON", "-DGGML_AVX2=OFF"), "contradictory"),
        (("-DLLAMAPY_AVX512=ON", "-DLLAMAPY_AVX2=OFF"), "contradictory"),
        (("-DLLAMAPY_PORTABLE=ON", "-DLLAMAPY_NATIVE=ON"), "contradictory"),
        (("-DLLAMAPY_PORTABLE=ON", "-DGGML_AVX512=OFF"), "contradictory"),
        (("-DLLAMAPY_PORTABLE=ON", "-DGGML_CPU_ALL_VARIANTS=OFF"), "contradictory"),
    ],
)
def test_contradictory_options_fail(tmp_path, opts, words):
    r = configure(tmp_path, *opts)
    assert r.returncode != 0
    assert words in (r.stdout + r.stderr)


# aarch64 (cross builds, as tools/neon_check.sh makes): configured with the
# host compiler but an aarch64 target processor, which is all options.cmake
# looks at. NEON is baseline there; -march=native cannot describe the target.
AARCH64 = ("-DCMAKE_SYSTEM_NAME=Linux", "-DCMAKE_SYSTEM_PROCESSOR=aarch64")


@pytest.mark.parametrize(
    "opts, mode, neon",
    [
        ((), "portable (all kernel levels)", True),  # the default NATIVE becomes PORTABLE when cross-building
        (("-DLLAMAPY_PORTABLE=ON",), "portable (all kernel levels)", True),
        (("-DGGML_CPU_ALL_VARIANTS=ON",), "portable (all kernel levels)", True),
        (("-DLLAMAPY_NATIVE=OFF",), "portable (scalar kernels only)", False),
    ],
)
def test_aarch64_options(tmp_path, opts, mode, neon):
    r = configure(tmp_path, *AARCH64, *opts)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"llamapy: CPU backend, {mode};" in r.stdout
    assert ("LP_ENABLE_NEON=1" in r.stdout) == neon
    assert "LP_ENABLE_AVX2" not in r.stdout


@pytest.mark.parametrize("opts, words", [(("-DLLAMAPY_NATIVE=ON",), "cross build"),
                                         (("-DLLAMAPY_AVX2=ON",), "target processor"),
                                         (("-DGGML_AVX512=ON",), "target processor")])
def test_aarch64_bad_options_fail(tmp_path, opts, words):
    r = configure(tmp_path, *AARCH64, *opts)
    assert r.returncode != 0
    assert words in (r.stdout + r.stderr)


@pytest.mark.parametrize("opt", ["-DLLAMAPY_VULKAN=ON", "-DGGML_VULKAN=on", "-DLLAMA_VULKAN=ON"])
def test_vulkan_without_its_sdk_fails_loudly(tmp_path, opt):
    # no loader / headers found (as on a machine without libvulkan-dev): an error naming the packages
    r = configure(tmp_path, opt, "-DCMAKE_DISABLE_FIND_PACKAGE_Vulkan=ON")
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "libvulkan-dev" in out and "glslc" in out and "CPU backend only" in out


@pytest.mark.skipif(shutil.which("glslc") is None, reason="needs glslc and libvulkan-dev (Debian: libvulkan-dev glslc)")
@pytest.mark.parametrize("opt", ["-DLLAMAPY_VULKAN=ON", "-DGGML_VULKAN=on"])
def test_vulkan_is_accepted(tmp_path, opt):
    r = configure(tmp_path, opt)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "LP_ENABLE_VULKAN=1" in r.stdout and "llamapy: Vulkan backend" in r.stdout


def test_vulkan_contradiction_fails(tmp_path):
    r = configure(tmp_path, "-DLLAMAPY_VULKAN=ON", "-DGGML_VULKAN=OFF")
    assert r.returncode != 0 and "contradictory" in (r.stdout + r.stderr)
