"""Records llama.cpp's sampler chains on fixed logits, for
tests/test_sampler_llama_cpp.py: the tokens llama-cpp-python 0.3.x's
``Llama`` sampling settings draw, seed by seed and step by step.

Each case is a chain as ``Llama._init_sampler`` builds it (logit bias,
penalties, then greedy / dist / mirostat / the top-k, typical, top-p, min-p,
temperature, dist stages) applied with ``llama_sampler_apply`` to candidate
arrays made from the stored logits (one row per step, the drawn token
accepted after each step, as ``llama_sampler_sample`` does). Needs
llama-cpp-python (never a dependency of llamapy):

    PYTHONPATH=/path/to/llama-cpp-python python tools/record_sampler_fixtures.py tests/data/sampler
"""
from __future__ import annotations

import ctypes
import json
import os
import sys

import numpy as np

N_VOCAB, N_STEPS = 3000, 5
SEEDS = (0, 1, 42, 1234)

# (name, llama-cpp-python sampling keywords); the others keep Llama.sample's defaults
CASES = [
    ("default", {}),
    ("hot_no_top_k", {"temp": 1.3, "top_k": 0}),
    ("min_p_unsorted", {"temp": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.1}),
    ("raw_softmax", {"temp": -1.0}),
    ("typical", {"temp": 0.9, "typical_p": 0.7}),
    ("top_p_half", {"temp": 1.0, "top_p": 0.5, "min_p": 0.0}),
    ("wide", {"temp": 1.5, "top_k": 100, "top_p": 0.99, "min_p": 0.01}),
    # every step on the first row, so that the penalties see repeated tokens
    ("penalties", {"temp": 0.8, "repeat_penalty": 1.3, "frequency_penalty": 0.2, "presence_penalty": 0.3,
                   "same_row": True}),
    ("mirostat", {"temp": 1.0, "mirostat_mode": 1}),
    ("mirostat2", {"temp": 1.0, "mirostat_mode": 2, "mirostat_tau": 4.0}),
    ("logit_bias", {"temp": 0.8, "logit_bias": {"5": 4.0, "17": -100.0, "2": 3.0}}),
    ("greedy", {"temp": 0.0}),
]
DEFAULTS = dict(top_k=40, top_p=0.95, min_p=0.05, typical_p=1.0, temp=0.8, repeat_penalty=1.0,
                frequency_penalty=0.0, presence_penalty=0.0, mirostat_mode=0, mirostat_tau=5.0, mirostat_eta=0.1,
                logit_bias=None, same_row=False)


def make_logits() -> np.ndarray:
    """Logits with a realistic shape: a few strong tokens over a long tail."""
    rng = np.random.default_rng(20261206)
    rows = rng.standard_normal((N_STEPS, N_VOCAB)).astype(np.float32) * 2.0
    for s in range(N_STEPS):
        top = rng.choice(N_VOCAB, 12, replace=False)
        rows[s, top] += rng.uniform(4.0, 9.0, 12).astype(np.float32)
    return rows


def chain(lc, kw: dict, seed: int, last_n: int = 64):
    """llama-cpp-python's Llama._init_sampler chain for these settings."""
    from llama_cpp._internals import LlamaSampler

    s = LlamaSampler()
    if kw["logit_bias"]:
        s.add_logit_bias(N_VOCAB, {int(k): float(v) for k, v in kw["logit_bias"].items()})
    s.add_penalties(N_VOCAB, last_n, kw["repeat_penalty"], kw["frequency_penalty"], kw["presence_penalty"])
    if kw["temp"] < 0.0:
        s.add_dist(seed)
    elif kw["temp"] == 0.0:
        s.add_greedy()
    elif kw["mirostat_mode"] == 1:
        s.add_mirostat(N_VOCAB, seed, kw["mirostat_tau"], kw["mirostat_eta"], 100)
    elif kw["mirostat_mode"] == 2:
        s.add_mirostat_v2(seed, kw["mirostat_tau"], kw["mirostat_eta"])
    else:
        s.add_top_k(kw["top_k"])
        s.add_typical(kw["typical_p"], 1)
        s.add_top_p(kw["top_p"], 1)
        s.add_min_p(kw["min_p"], 1)
        s.add_temp(kw["temp"])
        s.add_dist(seed)
    return s


def draw(lc, sampler, row: np.ndarray) -> int:
    data = (lc.llama_token_data * N_VOCAB)()
    for i in range(N_VOCAB):
        data[i].id, data[i].logit, data[i].p = i, float(row[i]), 0.0
    arr = lc.llama_token_data_array(data=data, size=N_VOCAB, selected=-1, sorted=False)
    lc.llama_sampler_apply(sampler.sampler, ctypes.byref(arr))
    token = int(arr.data[arr.selected].id)
    lc.llama_sampler_accept(sampler.sampler, token)
    return token


def main() -> int:
    import llama_cpp as lc

    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join("tests", "data", "sampler")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    logits = make_logits()
    np.save(out + "_logits.npy", logits)
    cases = []
    for name, given in CASES:
        kw = {**DEFAULTS, **given}
        draws = {}
        for seed in SEEDS:
            s = chain(lc, kw, seed)
            draws[str(seed)] = [draw(lc, s, logits[0 if kw["same_row"] else step]) for step in range(N_STEPS)]
        cases.append({"name": name, "settings": kw, "draws": draws})
    doc = {"llama_cpp_python": lc.__version__, "n_vocab": N_VOCAB, "steps": N_STEPS, "penalty_last_n": 64,
           "cases": cases}
    with open(out + "_draws.json", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {out}_logits.npy and {out}_draws.json ({len(cases)} cases x {len(SEEDS)} seeds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
