"""Records llama.cpp's outputs (through llama-cpp-python 0.3.36) on one MoE GGUF.

What this is: for each token-id prompt, llama.cpp's greedy continuation with the top-10 ids and
raw logits at every step (teacher-forced along its own path), the full last-position logits of
the prompt, its own batch-vs-token-by-token noise, and the same with flash attention off.
What it is not: a test. It only writes what llama.cpp produced (errors included, as data).
"""
from __future__ import annotations

import numpy as np

N_THREADS = 2
N_CTX = 256
N_BATCH = 512
N_STEPS = 16
TOPK = 10
# Token-id prompts (ids below 320: ordinary BPE tokens / SentencePiece pieces in every vocab).
# No BOS is added: the ids are evaluated exactly as listed. The last prompt is longer than
# gpt-oss's sliding window (8).
PROMPTS = [
    [17, 101, 250],
    [300, 45, 9, 120],
    [64, 64, 199, 7],
    [11, 42, 97, 150, 203, 260, 31, 77, 188, 5, 140, 222, 56, 90, 310, 12, 66, 231, 18, 275],
]


def _top(row: np.ndarray, k: int = TOPK) -> list:
    i = np.argsort(-row, kind="stable")[:k]
    return [[int(j), round(float(row[j]), 5)] for j in i]


def _open(Llama, path: str, flash: bool):
    return Llama(model_path=path, n_ctx=N_CTX, n_batch=N_BATCH, n_threads=N_THREADS,
                 n_threads_batch=N_THREADS, logits_all=True, flash_attn=flash, verbose=False,
                 seed=0)


def greedy(llm, prompt: list) -> tuple[list, list, np.ndarray]:
    """Prompt as one batch, then N_STEPS greedy tokens one at a time."""
    llm.reset()
    llm.eval(prompt)
    last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    ids, steps = [], []
    for _ in range(N_STEPS):
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        top = _top(row)
        steps.append(top)
        ids.append(top[0][0])
        llm.eval([ids[-1]])
    return ids, steps, last


def all_rows(llm, seq: list, chunk: int) -> np.ndarray:
    """Logits of every position of `seq`, evaluated `chunk` tokens per batch."""
    llm.reset()
    for i in range(0, len(seq), chunk):
        llm.eval(seq[i:i + chunk])
    return np.array(llm.scores[:len(seq)], dtype=np.float32)


def top10_delta(a: np.ndarray, b: np.ndarray) -> list:
    """Per position: max |a - b| over the top-10 ids of a."""
    out = []
    for ra, rb in zip(a, b):
        i = np.argsort(-ra, kind="stable")[:TOPK]
        out.append(round(float(np.max(np.abs(ra[i] - rb[i]))), 6))
    return out


def record_file(path: str, key: str, arrays: dict) -> dict:
    from llama_cpp import Llama

    res: dict = {"prompts": []}
    llm = _open(Llama, path, True)
    md = llm.metadata
    res["metadata"] = {k: v for k, v in md.items()
                       if not k.startswith("tokenizer.ggml.") or k in (
                           "tokenizer.ggml.model", "tokenizer.ggml.pre",
                           "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id")}
    res["n_vocab"] = llm.n_vocab()
    off = _open(Llama, path, False)
    for k, prompt in enumerate(PROMPTS):
        e: dict = {"prompt_ids": prompt}
        ids, steps, last = greedy(llm, prompt)
        e["ids"], e["top10"] = ids, steps
        arrays[f"{key}.p{k}.last_logits"] = last
        e["last_top10"] = _top(last)
        seq = prompt + ids
        batch = all_rows(llm, seq, len(seq))
        one = all_rows(llm, seq, 1)
        d = top10_delta(batch, one)
        e["noise_batch_vs_token_by_token"] = {
            "what": "seq = prompt + ids evaluated as one batch vs one token per eval; per "
                    "position max |delta| over the batch run's top-10 ids (flash on)",
            "per_position": d, "max": max(d)}
        # flash attention off: its own greedy run, and its difference from the flash-on run
        ids_off, steps_off, last_off = greedy(off, prompt)
        arrays[f"{key}.p{k}.last_logits_flash_off"] = last_off
        tf_off = all_rows(off, seq, len(seq))
        d_fl = top10_delta(batch, tf_off)
        e["flash_off"] = {
            "ids": ids_off, "top10": steps_off,
            "same_ids_as_flash_on": ids_off == ids,
            "max_abs_last_logits_vs_flash_on": round(float(np.max(np.abs(last_off - last))), 6),
            "top10_delta_vs_flash_on_per_position": d_fl, "max": max(d_fl)}
        res["prompts"].append(e)
    llm.close()
    off.close()
    return res
