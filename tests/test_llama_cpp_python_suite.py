"""llama-cpp-python 0.3.36's own test suite (its sdist's tests/), run against
llamapy with the import changed (``llama_cpp`` -> ``llamapy``), as a user
switching over would.

Its tests download models from Hugging Face (there is no network here), so
the harness gives ``hf_hub_download`` local files instead: the Gemma 3 270M
test model for the small transformer models (stories15M, the Qwen3.5 0.8B of
two tests) and all-MiniLM-L6-v2 (F16, converted) for bge-small. Left out, with
the reason: the mamba cases (a state-space architecture llamapy does not have),
and test_real_model / test_real_llama, whose assertions are Qwen3.5 0.8B's own
tokens and texts (with Gemma the prompt of test_real_model needs 17 of its 16
batch slots). The Falcon-H1 hybrid cases run in a second pass against the tiny
Qwen3.5 hybrid of tests/data/hybrid. Two lines of the test file change besides the import:
``from scipy.special import log_softmax`` (unused by these tests; scipy is not
a test dependency) and ``from huggingface_hub import hf_hub_download``.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import minilm_ref as M

import llamapy

DESELECT = ["recurrent", "hybrid", "test_real_model", "test_real_llama and not embeddings and not repeated"]

LOCAL_HUB = '''
import json as _json, os as _os


def hf_hub_download(repo_id, filename, **kwargs):
    """The test harness's stand-in: local copies of the models the tests name."""
    path = _json.loads(_os.environ["LLAMAPY_LOCAL_HUB"]).get(f"{repo_id}/{filename}")
    if path is None:
        raise RuntimeError(f"{repo_id}/{filename}: no local copy (no network in these tests)")
    return path
'''


def _ported(src: Path, dest: Path) -> None:
    """The sdist's tests with llama_cpp -> llamapy (and the two imports above replaced)."""
    dest.mkdir()
    for f in src.glob("*.py"):
        text = re.sub(r"\bllama_cpp\b", "llamapy", f.read_text(encoding="utf-8"))
        text = text.replace("from scipy.special import log_softmax\n", "")
        text = text.replace("from huggingface_hub import hf_hub_download\n", LOCAL_HUB)
        (dest / f.name).write_text(text, encoding="utf-8")


def _run_suite(sdist: Path, tests: Path, hub: dict, select: str = "", node_ids: tuple = ()) -> tuple:
    """The ported tests selected by ``select`` (pytest -k) or given as ``node_ids`` (names in
    test_llama.py), with ``hub`` as the local copies of the models they name: (its output,
    the names of the tests that passed). -k also matches the folders' names, which hold the
    calling test's name: node ids where that name holds a selecting word."""
    # the llamapy under test (installed or PYTHONPATH's), not necessarily this checkout's
    root = str(Path(llamapy.__file__).resolve().parents[1])
    env = dict(os.environ, LLAMAPY_LOCAL_HUB=json.dumps(hub), HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    where = [f"{tests / 'test_llama.py'}::{n}" for n in node_ids] if node_ids else [str(tests), "-k", select]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *where, "-rA"]
    # From the sdist root: its tokenizer test reads ./vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf.
    r = subprocess.run(cmd, cwd=sdist, env=env, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    return out, set(re.findall(r"^PASSED \S+::(\S+)", out, re.M))


def test_llama_cpp_python_tests_pass(llama_cpp_sdist, gemma_path, tmp_path):
    sdist = Path(llama_cpp_sdist)
    tests = tmp_path / "tests"
    _ported(sdist / "tests", tests)
    hub = {
        "lmstudio-community/Qwen3.5-0.8B-GGUF/Qwen3.5-0.8B-Q8_0.gguf": gemma_path,
        "ggml-org/models/tinyllamas/stories15M-q4_0.gguf": gemma_path,
        "CompendiumLabs/bge-small-en-v1.5-gguf/bge-small-en-v1.5-q4_k_m.gguf": M.gguf_path("f16"),
    }
    out, passed = _run_suite(sdist, tests, hub, " and ".join(f"not ({d})" for d in DESELECT))
    for name in ("test_llama_cpp_version", "test_llama_cpp_tokenization", "test_real_llama_embeddings",
                 "test_real_llama_repeated_prompt_cache",
                 "test_exact_cached_prompt_reuse_matches_fresh[llama_cpp_transformer_model_path-False-False]",
                 "test_loaded_exact_cached_prompt_reuse_matches_fresh[llama_cpp_transformer_model_path-False-False]",
                 "test_ram_cache_exact_prompt_hit_matches_fresh[llama_cpp_transformer_model_path-False-False]",
                 "test_shorter_prompt_prefix_reuse_matches_fresh[llama_cpp_transformer_model_path-False-False]"):
        assert name in passed, (name, out[-4000:])
    assert len(passed) >= 14, out[-4000:]  # + chat formats (2), grammar (3), speculative (1)


def test_llama_cpp_python_hybrid_tests_pass(llama_cpp_sdist, gemma_path, tmp_path):
    """Its hybrid-model cases (written for Falcon-H1, an architecture llamapy does not have)
    against a hybrid llamapy runs: the tiny random Qwen3.5 of tests/data/hybrid. They assert
    no model text: Llama._is_hybrid, a history edit inside the prompt cache, and exact,
    state-restored, RAM-cache and shorter-prefix reuse each equal to a fresh model."""
    sdist = Path(llama_cpp_sdist)
    tests = tmp_path / "tests"
    _ported(sdist / "tests", tests)
    qwen35 = str(Path(__file__).parent / "data" / "hybrid" / "qwen35" / "qwen35-q8_0.gguf")
    hub = {"tiiuae/Falcon-H1-Tiny-90M-Instruct-GGUF/Falcon-H1-Tiny-90M-Instruct-Q2_K.gguf": qwen35,
           "ggml-org/models/tinyllamas/stories15M-q4_0.gguf": gemma_path}
    case = "[llama_cpp_hybrid_model_path-False-True]"
    names = ["test_hybrid_model_prompt_cache_reset"] + [
        t + case for t in ("test_exact_cached_prompt_reuse_matches_fresh",
                           "test_loaded_exact_cached_prompt_reuse_matches_fresh",
                           "test_ram_cache_exact_prompt_hit_matches_fresh",
                           "test_shorter_prompt_prefix_reuse_matches_fresh")]
    out, passed = _run_suite(sdist, tests, hub, node_ids=tuple(names))
    for name in names:
        assert name in passed, (name, out[-4000:])
