"""The non-linear 4-bit types IQ4_NL and IQ4_XS against llama.cpp on whole models: the grid
i-quants' tiny random llama (rows of 256, 2 layers) quantized by llama.cpp (llama-cpp-python
0.3.36, `pure`: every matrix, embeddings and output included, in one type) and what llama.cpp
produced on each, recorded by tools/make_iq_fixtures.py --set iq4 (tests/data/iq4).

The checks and their tolerances are tests/test_iq_lattice_llama_cpp.py's (its check_*
functions): on the CPU and, on a GPU build (tools/vulkan_check.sh runs this file on
lavapipe), with every layer on the device through the IQ4 shaders (shaders/matmul.comp,
get_rows.comp), and with a split (the second layer on the device, the first and the output on
the CPU); with every layer there, the device must hold the file's blocks, not F16 rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_iq_lattice_llama_cpp import (WHERE, check_every_matrix_has_the_type, check_fixture_files,
                                       check_llama_cpp_blocks_dequantize_as_gguf_py, check_matches_llama_cpp,
                                       check_the_gpu_holds_the_blocks_as_stored)

DATA = Path(__file__).parent / "data" / "iq4"
WHERE_SPLIT = WHERE + (["split"] if "gpu" in WHERE else [])
RECORD = json.loads((DATA / "record.json").read_text())


def test_fixture_files_are_intact():
    check_fixture_files(DATA)


def test_the_set_is_iq4_nl_and_iq4_xs():
    assert RECORD["matrix_type"] == {"IQ4_NL": "IQ4_NL", "IQ4_XS": "IQ4_XS"}


@pytest.mark.parametrize("ftype", list(RECORD["files"]))
def test_every_matrix_has_the_type(ftype):
    check_every_matrix_has_the_type(RECORD, ftype)


@pytest.mark.parametrize("where", WHERE_SPLIT)
@pytest.mark.parametrize("ftype", list(RECORD["files"]))
def test_matches_llama_cpp(ftype, where):
    check_matches_llama_cpp(DATA, RECORD, ftype, where)


@pytest.mark.skipif("gpu" not in WHERE, reason="no Vulkan device in this build or on this machine")
@pytest.mark.parametrize("ftype", list(RECORD["files"]))
def test_the_gpu_holds_the_blocks_as_stored(ftype):
    check_the_gpu_holds_the_blocks_as_stored(DATA, RECORD, ftype)


@pytest.mark.parametrize("ftype", list(RECORD["files"]))
def test_llama_cpp_blocks_dequantize_as_gguf_py(ftype):
    check_llama_cpp_blocks_dequantize_as_gguf_py(DATA, RECORD, ftype)
