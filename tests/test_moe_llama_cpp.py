"""Mixture-of-experts models against llama.cpp: the tiny random-weight models
of tests/data/moe (converted with llama.cpp's own convert_hf_to_gguf.py,
quantized with its quantizer) and what llama.cpp (llama-cpp-python 0.3.36)
produced on them, recorded by tools/make_moe_fixtures.py (see that folder's
README for the recordings and llama.cpp's own noise).

F16 files: the 16 greedy tokens equal llama.cpp's (up to a step where its own
flash-off run picks another token of a near tie, and ours is that one) and every step's top-10
logits (teacher-forced along llama.cpp's path) agree within TOL_F16, or
within 1.5 times llama.cpp's own flash-off/on difference at that step where
that is larger (a router near a tie). Quantized files: activations are rounded to 8 bits before
every product, so a one-ulp difference in summation order can flip a
rounding, and where two experts' router scores nearly tie, flip the chosen
pair: the logits of that position then jump by 1-5 while the others stay
within ~0.1 (llama.cpp's own flash on/off does the same, README). So: every
position within TOL_Q, except where llama.cpp itself moves by more than
TOL_Q / 2 between its two attention paths (recorded), and at most two other
positions per prompt (one flip and the next position, which attends to it);
the argmax equal to llama.cpp's wherever its top-2 gap exceeds TOL_Q."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from llamapy import Llama, _engine

# Every case on the CPU, and with every layer on a GPU where this build has a
# Vulkan device (tools/vulkan_check.sh runs it on lavapipe).
WHERE = ["cpu"] + (["gpu"] if "vulkan" in _engine.backends() and _engine.gpu_devices() else [])

DATA = Path(__file__).parent / "data" / "moe"
# The families this engine runs (the folder also holds later ones).
FAMILIES = ["qwen3moe", "qwen3moe_nonorm", "qwen3moe_kquant", "mixtral", "gptoss", "glm4moe", "deepseek2"]
TOL_F16 = 0.05   # llama.cpp's own: batch vs step 0.01, flash off vs on 0.03 on these files
TOL_Q = 0.4      # quantized: llama.cpp's flash off/on is up to ~0.3 away from routing flips


def record(family):
    return json.loads((DATA / family / "record.json").read_text())


def cases():
    for fam in FAMILIES:
        for ftype in record(fam)["files"]:
            yield pytest.param(fam, ftype, id=f"{fam}-{ftype}")


def test_fixture_files_are_intact():
    manifest = json.loads((DATA / "manifest.json").read_text())
    files = manifest["files"] if "files" in manifest else manifest
    for rel, info in files.items():
        if rel.split("/")[0] not in FAMILIES:
            continue
        data = (DATA / rel).read_bytes()
        assert len(data) == info["bytes"] and hashlib.sha256(data).hexdigest() == info["sha256"], rel


def teacher_forced(llm, prompt, ids):
    """Logits of every step along llama.cpp's greedy path (prompt, then its tokens)."""
    llm.reset()
    seq = list(prompt) + list(ids)
    llm.eval(seq[:-1])
    return np.array(llm.scores[:len(seq) - 1])[len(prompt) - 1:]

def check_recorded_prompt(llm, pr, last_logits, exact, where, tol_f16=TOL_F16, tol_q=TOL_Q):
    """One recorded prompt against llama.cpp (the rules of this module's docstring): top-10
    logits per teacher-forced step, the last prompt row's full logits, greedy tokens (F16), and
    for quantized files flips only where llama.cpp's own flash off/on paths part too, and typical
    positions as close as llama.cpp's two paths are."""
    steps = teacher_forced(llm, pr["prompt_ids"], pr["ids"])
    deltas, gaps, argmax_ok = [], [], []
    for i, top in enumerate(pr["top10"]):
        ids = [a for a, _ in top]
        ref = np.array([b for _, b in top])
        deltas.append(float(np.abs(steps[i][ids] - ref).max()))
        gaps.append(ref[0] - ref[1])
        argmax_ok.append(int(np.argmax(steps[i])) == pr["ids"][i])
    full = float(np.abs(steps[0] - last_logits).max())
    own = pr["flash_off"]["top10_delta_vs_flash_on_per_position"][len(pr["prompt_ids"]) - 1:]
    if exact:
        # where llama.cpp's own two paths differ by more (a near-tie in a router), so may we
        off = [i for i, d in enumerate(deltas) if d >= tol_f16 and d > 1.5 * own[i]]
        assert not off and full < tol_f16, f"{where}: top-10 off at {off} ({max(deltas):.4f}), all {full:.4f}"
        assert all(ok or gaps[i] <= 2 * own[i] for i, ok in enumerate(argmax_ok)), where
        # free-running greedy generation gives llama.cpp's tokens
        llm.reset()
        got = []
        for tok in llm.generate(pr["prompt_ids"], temp=0.0):
            got.append(tok)
            if len(got) == len(pr["ids"]):
                break
        if got != pr["ids"]:
            # Only at a near tie that llama.cpp's own two attention paths split on: up to and
            # including it, ours is one of them (after it the continuations are not comparable).
            first = next(i for i, (a, b) in enumerate(zip(got, pr["ids"])) if a != b)
            split = pr["flash_off"]["ids"][first] != pr["ids"][first] and gaps[first] <= 2 * own[first]
            assert split and got[:first + 1] == pr["flash_off"]["ids"][:first + 1], \
                f"{where}: greedy differs at step {first} ({got[first]} for {pr['ids'][first]})"
    else:
        flips = [i for i, d in enumerate(deltas) if d > tol_q]
        unexplained = [i for i in flips if own[i] <= tol_q / 2]
        assert len(unexplained) <= 2, \
            f"{where}: positions {unexplained} off by {[round(deltas[i], 3) for i in unexplained]}"
        for i, ok in enumerate(argmax_ok):
            assert ok or gaps[i] <= tol_q or i in flips, f"{where}: step {i} argmax differs (gap {gaps[i]:.3f})"
        assert np.median(deltas) < max(tol_q / 2, 1.5 * float(np.median(own))), where


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("family,ftype", list(cases()))
def test_matches_llama_cpp(family, ftype, where):
    rec = record(family)
    fr = rec["files"][ftype]
    npz = np.load(DATA / family / "logits.npz")
    llm = Llama(model_path=str(DATA / family / fr["file"]), n_ctx=rec["n_ctx"], n_batch=rec["n_batch"],
                n_threads=2, logits_all=True, flash_attn=True, verbose=False,
                n_gpu_layers=-1 if where == "gpu" else 0)
    assert llm.n_vocab() == fr["n_vocab"]
    exact = ftype == "F16"
    for pi, pr in enumerate(fr["prompts"]):
        check_recorded_prompt(llm, pr, npz[f"{ftype}.p{pi}.last_logits"], exact, f"{family} {ftype} prompt {pi}")
