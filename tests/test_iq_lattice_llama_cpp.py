"""The grid-based i-quants against llama.cpp on whole models: a tiny random llama (rows of
256, 2 layers) quantized by llama.cpp (llama-cpp-python 0.3.36, `pure`: every matrix,
embeddings and output included, in one type) to IQ2_XXS, IQ2_XS, IQ2_S (file type IQ2_M),
IQ3_XXS, IQ3_S, IQ1_S and IQ1_M, and what llama.cpp produced on each, recorded by
tools/make_iq_fixtures.py (tests/data/iq_lattice).

The comparison rules are tests/test_dense_llama_cpp.py's for quantized files: activations
are rounded to 8 bits before every product, so a one-ulp difference in summation order can
flip a rounding and move a logit by about as much as llama.cpp's own flash-attention off/on
moves it (0.15-0.8 on these files). Every step's top-10 logits, teacher-forced along
llama.cpp's greedy path, within TOL_Q except where llama.cpp itself moves by more than
TOL_Q / 2; the whole last-position row within max(TOL_Q, 1.5 times llama.cpp's own); the
median step no further than 1.5 times llama.cpp's own median; and free-running greedy
generation gives llama.cpp's 16 tokens up to a tie (a top-2 gap within TOL_Q).

The checks are functions of a fixture folder (check_*), which tests/test_iq4_llama_cpp.py
runs on the same model in IQ4_NL and IQ4_XS (tests/data/iq4)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from llamapy import Llama, _engine
from test_dense_llama_cpp import greedy, teacher_forced  # llama.cpp's greedy path, teacher-forced and free

DATA = Path(__file__).parent / "data" / "iq_lattice"
TOL_Q = 0.3
RECORD = json.loads((DATA / "record.json").read_text())


def check_fixture_files(data: Path):
    files = json.loads((data / "manifest.json").read_text())
    for rel, info in files.items():
        raw = (data / rel).read_bytes()
        assert len(raw) == info["bytes"] and hashlib.sha256(raw).hexdigest() == info["sha256"], rel


def check_every_matrix_has_the_type(record: dict, ftype: str):
    """`pure` put the one type on every matrix (the test would pass on fallbacks otherwise)."""
    want = record["matrix_type"][ftype]
    types = record["tensor_types"][ftype]
    assert {t for name, t in types.items() if not name.endswith("norm.weight")} == {want}


# On a GPU build (tools/vulkan_check.sh runs this file on lavapipe) also with every layer on the
# device, through the Vulkan shaders of these types (shaders/iq_lattice.glsl).
WHERE = ["cpu"] + (["gpu"] if "vulkan" in _engine.backends() and _engine.gpu_devices() else [])
# where -> n_gpu_layers; "split": the second of the two layers on the device, the first and the
# output on the CPU (tests/test_iq4_llama_cpp.py runs it)
GPU_LAYERS = {"cpu": 0, "gpu": -1, "split": 1}


def check_matches_llama_cpp(data: Path, record: dict, ftype: str, where: str):
    fr = record["files"][ftype]
    assert "error" not in fr, fr.get("error")
    npz = np.load(data / "logits.npz")
    llm = Llama(model_path=str(data / fr["file"]), n_ctx=record["n_ctx"], n_batch=record["n_batch"],
                n_threads=2, logits_all=True, flash_attn=True, verbose=False,
                n_gpu_layers=GPU_LAYERS[where])
    assert llm.n_vocab() == fr["n_vocab"]
    for pi, pr in enumerate(fr["prompts"]):
        at = f"{ftype} prompt {pi}"
        steps = teacher_forced(llm, pr["prompt_ids"], pr["ids"])
        deltas, gaps = [], []
        for i, top in enumerate(pr["top10"]):
            ids = [a for a, _ in top]
            ref = np.array([b for _, b in top])
            deltas.append(float(np.abs(steps[i][ids] - ref).max()))
            gaps.append(ref[0] - ref[1])
        own = pr["flash_off"]["top10_delta_vs_flash_on_per_position"][len(pr["prompt_ids"]) - 1:]
        unexplained = [i for i, d in enumerate(deltas) if d > TOL_Q and own[i] <= TOL_Q / 2]
        assert not unexplained, f"{at}: positions {unexplained} off by {[round(deltas[i], 3) for i in unexplained]}"
        last = npz[f"{ftype}.p{pi}.last_logits"]
        full = float(np.abs(steps[0] - last).max())
        own_full = float(np.abs(npz[f"{ftype}.p{pi}.last_logits_flash_off"] - last).max())
        assert full < max(TOL_Q, 1.5 * own_full), \
            f"{at}: whole last row off by {full:.3f} (llama.cpp's own {own_full:.3f})"
        assert np.median(deltas) < max(0.05, 1.5 * float(np.median(own))), \
            f"{at}: median {np.median(deltas):.3f}, llama.cpp's own {np.median(own):.3f}"
        got = greedy(llm, pr["prompt_ids"], len(pr["ids"]))
        for i, (a, b) in enumerate(zip(got, pr["ids"])):
            if a != b:
                assert gaps[i] <= TOL_Q, f"{at}: step {i} gave {a}, llama.cpp {b} (its top-2 gap {gaps[i]:.4f})"
                break
        else:
            assert len(got) == len(pr["ids"]), at
    llm.close()


def check_the_gpu_holds_the_blocks_as_stored(data: Path, record: dict, ftype: str):
    """With every layer on the device, the device memory the model takes stays within what
    the plan counts (the file's matrix bytes, the KV cache, the activations), with less room
    left than the F16 rows of a type without shaders would add (the token embeddings left out
    of that sum: they may be read on the host)."""
    import gguf

    fr = record["files"][ftype]
    r = gguf.GGUFReader(str(data / fr["file"]))
    f16_extra = sum(2 * int(t.n_elements) - int(t.n_bytes) for t in r.tensors
                    if t.tensor_type.name == record["matrix_type"][ftype] and t.name != "token_embd.weight")
    before = _engine.vulkan_memory_used()
    llm = Llama(model_path=str(data / fr["file"]), n_ctx=record["n_ctx"], n_batch=record["n_batch"],
                n_threads=2, flash_attn=True, verbose=False, n_gpu_layers=-1)
    llm.eval(fr["prompts"][0]["prompt_ids"])
    used = _engine.vulkan_memory_used() - before
    planned = sum(d["total_bytes"] for d in llm._ctx.device_memory() if d["device"] != "cpu")
    llm.close()
    assert used <= planned, f"{ftype}: the device holds {used} bytes, the plan {planned}"
    assert planned - used < f16_extra, f"{ftype}: {planned - used} bytes to spare, F16 rows add {f16_extra}"


def check_llama_cpp_blocks_dequantize_as_gguf_py(data: Path, record: dict, ftype: str):
    """Every matrix llama.cpp's quantizer wrote dequantizes to gguf-py's bits (real blocks:
    the scales and grid points its search picked, where the unit tests draw random ones)."""
    import gguf

    r = gguf.GGUFReader(str(data / record["files"][ftype]["file"]))
    n_checked = 0
    for t in r.tensors:
        if t.tensor_type.name != record["matrix_type"][ftype]:
            continue
        raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
        shape = [int(d) for d in reversed(t.shape)]
        got = _engine.dequantize(raw, t.tensor_type.name, shape)
        want = gguf.quants.dequantize(raw, t.tensor_type).reshape(shape)
        assert np.array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32)), t.name
        n_checked += 1
    assert n_checked == 16


def test_fixture_files_are_intact():
    check_fixture_files(DATA)


@pytest.mark.parametrize("ftype", list(RECORD["files"]))
def test_every_matrix_has_the_type(ftype):
    check_every_matrix_has_the_type(RECORD, ftype)


@pytest.mark.parametrize("where", WHERE)
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
