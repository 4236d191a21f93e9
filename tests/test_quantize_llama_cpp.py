"""``quantize_model`` against llama.cpp's quantizer, byte for byte.

tests/data/quantize/llama_cpp.json holds what llama-cpp-python 0.3.36's
``llama_model_quantize`` wrote (tools/record_quantize_fixtures.py) for the tiny
dense, MoE, hybrid and Gemma 4 fixtures and three synthetic inputs with rows of
256-element multiples, in every file type llamapy writes plus option cases:
the SHA-256 of the whole file and of its header, and each tensor's type and
data hash. Each case is quantized here the same way and must match; cases
llama.cpp refused must be refused. Where llama.cpp wrote a type whose blocks
the engine cannot write (none now: every type of the recorded files is
written), llamapy must refuse naming it. The IQ1 / IQ2 file types are
compared with importance matrices, the IQ3 ones with and without.
"""
from __future__ import annotations

import hashlib
import json
import pathlib

import pytest

from llamapy import _engine
from llamapy.gguf_file import GGUFFile
from llamapy.quantize_gguf import _IGNORE_IMATRIX, quantize_model

DATA = pathlib.Path(__file__).parent / "data"
FIXTURE = json.loads((DATA / "quantize" / "llama_cpp.json").read_text())
CASES = FIXTURE["cases"]


def _id(c: dict) -> str:
    opts = ",".join(f"{k}={v}" for k, v in sorted(c["options"].items()))
    return f"{pathlib.Path(c['input']).stem}-{c['ftype']}" + (f"-{opts}" if opts else "")


def assert_same_as_recorded(ours: dict, case: dict, names: list) -> None:
    """Our output's summary against a recorded case: the tensor names, each tensor's type and
    data hash (a mismatch names the tensors), the header and the whole file."""
    assert ours["names"] == names
    theirs = dict(zip(names, case["tensors"]))
    diff = {n: (t, theirs[n]) for n, t in zip(ours["names"], ours["tensors"]) if t != theirs[n]}
    assert diff == {}, f"{len(diff)} tensors differ (ours, llama.cpp's): {diff}"
    assert ours["header"] == case["header"], "key/values or tensor table differ"
    assert ours["file"] == case["file"]


def summary(path: pathlib.Path) -> dict:
    data = path.read_bytes()
    with GGUFFile(path) as f:
        names = [t.name for t in f.tensors]
        tensors = [f"{t.type_name}:{hashlib.sha256(data[t.offset:t.offset + t.nbytes]).hexdigest()[:12]}"
                   for t in f.tensors]
        data_offset = f.parts[0].data_offset
    return {"file": hashlib.sha256(data).hexdigest(), "header": hashlib.sha256(data[:data_offset]).hexdigest(),
            "names": names, "tensors": tensors}


def part_summary(path: pathlib.Path) -> dict:
    """summary() of one file of a split model (GGUFFile opens a split model as a whole)."""
    import gguf

    data = path.read_bytes()
    r = gguf.GGUFReader(path)
    return {"file": hashlib.sha256(data).hexdigest(), "header": hashlib.sha256(data[:r.data_offset]).hexdigest(),
            "names": [t.name for t in r.tensors],
            "tensors": [f"{t.tensor_type.name}:"
                        f"{hashlib.sha256(data[t.data_offset:t.data_offset + t.n_bytes]).hexdigest()[:12]}"
                        for t in r.tensors]}


def test_inputs_are_the_recorded_ones():
    for inp, rec in FIXTURE["inputs"].items():
        assert hashlib.sha256((DATA / inp).read_bytes()).hexdigest() == rec["sha256"], inp


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_same_bytes_as_llama_cpp(case, tmp_path, monkeypatch):
    out = tmp_path / "out.gguf"
    opts = dict(case["options"])
    if "tensor_types" in opts:
        opts["tensor_types"] = [tuple(p) for p in opts["tensor_types"]]
    if "imatrix" in opts:
        # the matrix's path as given goes into quantize.imatrix.file: the recording's relative one
        monkeypatch.chdir(DATA / "quantize")
    if not case["ok"]:
        with pytest.raises(ValueError):
            quantize_model(DATA / case["input"], out, case["ftype"], n_threads=2, **opts)
        assert list(tmp_path.iterdir()) == []  # nothing left behind
        return
    if "parts" in case:  # keep_split: one output per input part, named as llama-quantize names them
        quantize_model(DATA / case["input"], out, case["ftype"], n_threads=2, **opts)
        assert sorted(p.name for p in tmp_path.iterdir()) == [p["name"] for p in case["parts"]]
        for part in case["parts"]:
            ours = part_summary(tmp_path / part["name"])
            assert (ours["names"], ours["tensors"], ours["header"]) == (part["names"], part["tensors"], part["header"])
            assert ours["file"] == part["file"]
        return
    # every type llama.cpp wrote here has a writer, importance-weighted where a matrix is given
    theirs_types = {t.split(":")[0] for t in case["tensors"]}
    assert all(_engine.type_info(t)["can_quantize"] or _engine.type_info(t)["can_quantize_weighted"]
               for t in theirs_types), theirs_types
    assert all(_engine.type_info(t)["can_quantize_weighted"] for t in theirs_types
               if "imatrix" in opts and t not in _IGNORE_IMATRIX), theirs_types
    quantize_model(DATA / case["input"], out, case["ftype"], n_threads=2, **opts)
    assert_same_as_recorded(summary(out), case, FIXTURE["inputs"][case["input"]]["names"])
