"""Gemma 3 270M with flash attention off and on, against llama.cpp's own
off/on logits (tests/data/gemma3_270m_flash_attn.json, recorded with
tools/record_llama_cpp_fixtures.py --flash): llamapy's on/off difference
stays within llama.cpp's, and both settings agree with llama.cpp."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

FIXTURE = Path(__file__).parent / "data" / "gemma3_270m_flash_attn.json"


@pytest.fixture(scope="module")
def rows(gemma_path):
    from llamapy import Llama

    fx = json.loads(FIXTURE.read_text())
    out = {}
    for fa in (False, True):
        with Llama(model_path=gemma_path, n_ctx=512, n_batch=512, n_threads=2, logits_all=True, flash_attn=fa,
                   verbose=False) as llm:
            short = llm.tokenize(fx["short_prompt"].encode(), add_bos=True, special=False)
            assert short == fx["cases"][0]["ids"]
            llm.eval(short)
            r = {"short": np.array(llm.scores[len(short) - 1])}
            llm.reset()
            # The 300-token prompt and the decode path in one batch: rows at the cases' positions.
            llm.eval(fx["long_ids"] + fx["decode_ids"][:-1])
            for c in fx["cases"][1:]:
                r[c["name"]] = np.array(llm.scores[c["position"]])
            out[fa] = r
    return fx, out


@pytest.mark.model
def test_on_off_difference_within_llama_cpps(rows):
    fx, r = rows
    worst = fx["worst"]
    for c in fx["cases"]:
        a, b = r[False][c["name"]].astype(np.float64), r[True][c["name"]].astype(np.float64)
        top = [i for i, _ in c["off"]["top20"]]
        assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) >= worst["min_cosine"], c["name"]
        assert np.abs(a[top] - b[top]).max() <= worst["top20_max_abs"], c["name"]
        # The largest of 262144 differences is a noisy statistic: within 1.25x of llama.cpp's worst
        # (llama.cpp's 1.57; measured 1.54 / 1.34 / 1.40 at avx512 / avx2 / scalar once the tile sums
        # were made layout-independent, 1.63 before).
        assert np.abs(a - b).max() <= 1.25 * worst["max_abs"], c["name"]


@pytest.mark.model
@pytest.mark.parametrize("fa", [False, True])
def test_both_settings_agree_with_llama_cpp(rows, fa):
    fx, r = rows
    for c in fx["cases"]:
        row = r[fa][c["name"]]
        ref = c["on" if fa else "off"]["top20"]
        ids = [i for i, _ in ref]
        vals = np.array([v for _, v in ref])
        if vals[0] - vals[1] > 0.5:  # llama.cpp's top 1 is not within rounding noise of its top 2
            assert int(np.argmax(row)) == ids[0], c["name"]
        # llamapy at AVX2 / AVX-512 measured up to 0.63 from llama.cpp (AVX2) here; llama.cpp's own on/off
        # difference reaches 1.16 on these ids.
        assert np.abs(row[ids] - vals).max() < 1.5, c["name"]
