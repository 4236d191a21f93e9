"""Gemma 3 270M against llama.cpp, decision by decision.

With quantized weights (and activations quantized to 8 bits inside the dot
products, as llama.cpp does), logits carry rounding noise that a long chain
of layers amplifies. llama.cpp itself moves the gap between its top-1 and
top-2 logits by up to ~0.75 when it evaluates the same text in other
batchings (prompt token by token, in chunks, in one batch with the
continuation) or at another CPU level (its AVX2 build against the AVX-512
build that recorded the reference); recorded per run kind in the data file
(gap_self_deviation). So "identical greedy output" is asserted exactly
where it is meaningful: at every position where llama.cpp's own top-1/top-2
margin exceeds the largest of those gap movements, our choice must be
llama.cpp's; below it, llama.cpp's token must still be within that bound of
our best. Over all positions, our gap deviations must be distributed like
llama.cpp's own (mean and 95th percentile within 1.5x of its largest). And
the free-running greedy continuations must agree with llama.cpp's as well as
llama.cpp agrees with itself when it evaluates the prompt in small chunks
instead of one batch: that changes 2-4 of its 8 continuations, each time at a
position that is a near-tie (recorded too).
Data: tests/data/gemma3_llama_cpp_margins.json, recorded with
tools/record_llama_cpp_fixtures.py (llama-cpp-python 0.3.36).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.model

DATA = Path(__file__).parent / "data" / "gemma3_llama_cpp_margins.json"


@pytest.fixture(scope="module")
def ref():
    return json.loads(DATA.read_text())


@pytest.fixture(scope="module")
def llm(gemma_path):
    from llamapy import Llama

    # The reference was recorded with llama.cpp's flash attention off: the
    # explicit path is its counterpart (flash vs explicit: test_flash_attn.py).
    m = Llama(gemma_path, n_ctx=512, n_threads=2, logits_all=True, verbose=False, flash_attn=False)
    yield m
    m.close()


def gap_runs(ref) -> list:
    """Statistics of llama.cpp's top-1/top-2 gap movement, one per recorded
    run (batchings x CPU levels) of the teacher-forced greedy cases."""
    return [r for level in ref["gap_self_deviation"].values() for r in level.values()]


def gap_noise(ref) -> float:
    """The largest move of llama.cpp's gap over all those runs."""
    return max(r["max"] for r in gap_runs(ref))


def margin(t2) -> float:
    return t2[0][1] - t2[1][1]


def test_reference_is_for_this_model(ref):
    from llamapy.default_model import default_model_path  # noqa: F401  (same package as the model path)

    assert ref["model_sha256"] == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert 0.0 < ref["batch_vs_step_top10_max_diff"] < 1.0
    assert set(ref["gap_self_deviation"]) == {"avx512", "avx2"}
    assert ref["gap_self_deviation"]["avx512"]["prompt_batch_then_steps"]["max"] == 0.0  # the recording build
    assert 0.0 < gap_noise(ref) < 1.0


def test_teacher_forced_greedy_decisions(ref, llm):
    noise = gap_noise(ref)
    checked = 0
    deviations = []
    for case in ref["greedy"]:
        llm.reset()
        llm.eval(case["prompt_ids"])
        for tok, t2 in zip(case["ids"], case["top2"]):
            row = np.array(llm.scores[llm.n_tokens - 1])
            assert row.max() - row[tok] <= noise, case["prompt"]
            if margin(t2) > noise:
                assert int(np.argmax(row)) == tok, case["prompt"]
                checked += 1
            (a, _), (b, _) = t2
            deviations.append(abs(float(row[a] - row[b]) - margin(t2)))
            llm.eval([tok])
    assert checked > 150  # most decisions are clear-cut and all of those must agree
    runs = gap_runs(ref)
    assert np.mean(deviations) <= 1.5 * max(r["mean"] for r in runs)
    assert np.percentile(deviations, 95) <= 1.5 * max(r["p95"] for r in runs)


def test_free_running_greedy_matches_until_a_near_tie(ref, llm):
    noise = gap_noise(ref)
    identical = 0
    for case in ref["greedy"]:
        llm.reset()
        out = []
        for t in llm.generate(case["prompt_ids"], temp=0.0):
            out.append(t)
            if len(out) == len(case["ids"]):
                break
        diverge = next((i for i, (a, b) in enumerate(zip(out, case["ids"])) if a != b), None)
        if diverge is None:
            identical += 1
        else:
            assert margin(case["top2"][diverge]) <= noise, (case["prompt"], diverge)
    assert identical >= len(ref["greedy"]) // 2


def greedy(llm, prompt_ids, n, chunk=None):
    llm.reset()
    if chunk:
        for i in range(0, len(prompt_ids), chunk):
            llm.eval(prompt_ids[i : i + chunk])
    else:
        llm.eval(prompt_ids)
    out = []
    for _ in range(n):
        out.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
        llm.eval([out[-1]])
    return out


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def test_greedy_agrees_with_llama_cpp_as_well_as_llama_cpp_agrees_with_itself(ref, llm):
    """Each continuation is llama.cpp's, or leaves it at a near-tie: where
    llama.cpp itself (prompt in chunks of 1-4 tokens) leaves its one-batch
    run, or where its own top-1/top-2 margin is within its own rounding
    noise. And no fewer continuations are identical than in llama.cpp's
    worst chunking."""
    noise = gap_noise(ref)
    chunked = ref["chunked_prompt_greedy_first_difference"]
    assert set(chunked) == {"1", "2", "3", "4"}
    fewest_identical = min(sum(d is None for d in v) for v in chunked.values())
    assert fewest_identical < len(ref["greedy"])  # the premise: llama.cpp is not exact against itself
    identical = 0
    for k, case in enumerate(ref["greedy"]):
        d = first_difference(greedy(llm, case["prompt_ids"], len(case["ids"])), case["ids"])
        if d is None:
            identical += 1
        else:
            assert d in {v[k] for v in chunked.values()} or margin(case["top2"][d]) <= noise, (case["prompt"], d)
    assert identical >= fewest_identical


def test_greedy_does_not_depend_on_prompt_chunking(ref, llm):
    """Unlike llama.cpp (above), our results do not depend on how a prompt is
    split into batches: every kernel gives bit-identical rows either way."""
    for case in ref["greedy"][:4]:
        whole = greedy(llm, case["prompt_ids"], 12)
        for chunk in (1, 3):
            assert greedy(llm, case["prompt_ids"], 12, chunk) == whole, (case["prompt"], chunk)


def test_top1_on_a_long_text(ref, llm):
    noise = gap_noise(ref)
    lt = ref["long_text"]
    llm.reset()
    llm.eval(lt["ids"])
    scores = np.array(llm.scores[: llm.n_tokens])
    top1 = scores.argmax(axis=1)
    agree = 0
    for i, t2 in enumerate(lt["top2"]):
        if top1[i] == t2[0][0]:
            agree += 1
        else:
            assert margin(t2) <= noise, i
    assert agree / len(lt["top2"]) >= 0.97
