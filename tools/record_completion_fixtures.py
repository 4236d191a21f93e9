"""Record how llama-cpp-python shapes completion text, logprobs and offsets
(and the signatures of Llama's public methods), as JSON fixtures for
tests/test_completion_parity.py.

Each case forces a scripted sequence of tokens (a logits processor that
leaves one token possible per step), so the text does not depend on the
engine's numerics: both libraries sample the same tokens, and only the way
they turn them into text, logprobs tokens, text offsets, finish reasons and
usage is compared. The scripts include byte-fallback tokens that are not
valid UTF-8 on their own (a lone continuation byte, a character split over
three tokens, a truncated sequence, one left unfinished at the end).

Usage (llama-cpp-python installed; it is never a dependency of llamapy):

    python tools/record_completion_fixtures.py [--model GGUF] [--no-repack]

``--no-repack`` loads the model without llama.cpp's extra buffer types
(weight repacking): on some CPUs with AMX its repacked kernels crash.
Writes tests/data/completion_parity.json.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "completion_parity.json"

# Token scripts, written as pieces: ("text", s) is the tokenization of s
# without BOS; ("byte", b) the byte-fallback token <0xBB>; ("eos",) EOS.
SCRIPTS: Dict[str, List[list]] = {
    "ascii": [["text", " one two three"]],
    "lone_continuation": [["text", "Hi"], ["byte", 0x80], ["text", " there"]],
    "split_euro": [["text", "Hi"], ["byte", 0xE2], ["byte", 0x82], ["byte", 0xAC], ["text", " there"]],
    "truncated_then_ascii": [["text", "A"], ["byte", 0xE2], ["byte", 0x82], ["text", "B and more"]],
    "unfinished_at_eos": [["text", "end"], ["byte", 0xE2], ["byte", 0x82], ["eos"]],
    "invalid_between_stop": [["text", "x"], ["byte", 0xFF], ["text", "STOP here STOP"]],
}

CASES: List[Dict[str, Any]] = []
for name in SCRIPTS:
    CASES.append({"script": name, "kwargs": {"max_tokens": 24}})
    CASES.append({"script": name, "kwargs": {"max_tokens": 24, "logprobs": 2}})
    CASES.append({"script": name, "kwargs": {"max_tokens": 24, "logprobs": 2, "echo": True}})
    CASES.append({"script": name, "kwargs": {"max_tokens": 24, "stream": True}})
CASES.append({"script": "invalid_between_stop", "kwargs": {"max_tokens": 24, "stop": ["STOP"]}})
CASES.append({"script": "invalid_between_stop", "kwargs": {"max_tokens": 24, "stop": ["xSTOP"]}})
CASES.append({"script": "invalid_between_stop", "kwargs": {"max_tokens": 24, "stop": ["STOP"], "logprobs": 1}})
CASES.append({"script": "ascii", "kwargs": {"max_tokens": 2, "logprobs": 1}})
CASES.append({"script": "ascii", "kwargs": {"max_tokens": 24, "logprobs": 1, "stream": True}})
CASES.append({"script": "ascii", "kwargs": {"max_tokens": 3, "stream": True}})

PROMPTS = ["The word is", "Prix: 10 €, café"]
CHAT_SCRIPTS = ["ascii", "lone_continuation", "split_euro", "unfinished_at_eos"]


def script_tokens(llm: Any, script: List[list]) -> List[int]:
    out: List[int] = []
    for item in script:
        if item[0] == "text":
            out.extend(llm.tokenize(item[1].encode(), add_bos=False, special=False))
        elif item[0] == "byte":
            out.append(byte_token(llm, item[1]))
        else:
            out.append(llm.token_eos())
    return out


def byte_token(llm: Any, b: int) -> int:
    """The id of <0xBB> (llama.cpp's byte-fallback token), found in the GGUF's token list."""
    if not _BYTE_TOKENS:
        from llamapy.gguf_file import GGUFFile  # reads the token list without llama.cpp

        names = GGUFFile(llm.model_path).metadata["tokenizer.ggml.tokens"]
        _BYTE_TOKENS.update((n, i) for i, n in enumerate(names) if len(n) == 6 and n.startswith("<0x"))
    return _BYTE_TOKENS[f"<0x{b:02X}>"]


_BYTE_TOKENS: Dict[str, int] = {}


def forcing(script: List[int], eos: int):
    """A logits processor that allows only the script's next token (then EOS)."""
    queue = list(script)

    def force(input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        out = np.full_like(scores, -np.inf)
        out[queue.pop(0) if queue else eos] = 0.0
        return out

    return force


def summary(result: Any, stream: bool) -> Dict[str, Any]:
    """What the tests compare: text, finish reason, usage, logprobs tokens and offsets."""
    if not stream:
        choice = result["choices"][0]
        lp = choice["logprobs"]
        return {"text": choice["text"], "finish_reason": choice["finish_reason"], "usage": result["usage"],
                "object": result["object"], "id_prefix": result["id"][:5],
                "logprobs": None if lp is None else {
                    "tokens": lp["tokens"], "text_offset": lp["text_offset"],
                    "null_logprobs": [i for i, v in enumerate(lp["token_logprobs"]) if v is None],
                    "chosen_in_top": [t in (top or {t: 0}) for t, top in zip(lp["tokens"], lp["top_logprobs"])]}}
    chunks = list(result)
    texts = [c["choices"][0]["text"] for c in chunks]
    tokens: List[str] = []
    offsets: List[int] = []
    for c in chunks:
        lp = c["choices"][0]["logprobs"]
        if lp:
            tokens += lp["tokens"]
            offsets += lp["text_offset"]
    return {"text": "".join(texts), "finish_reason": chunks[-1]["choices"][0]["finish_reason"],
            "object": chunks[0]["object"], "logprobs_tokens": tokens, "text_offset": offsets,
            "n_finish": sum(c["choices"][0]["finish_reason"] is not None for c in chunks)}


# Public methods whose signatures (names, kinds, defaults) llamapy mirrors.
SIGNATURES = ("__init__", "__call__", "create_completion", "create_chat_completion", "create_chat_completion_openai_v1",
              "generate", "sample", "eval", "tokenize", "detokenize", "embed", "create_embedding", "save_state",
              "load_state", "reset", "set_seed", "set_cache", "n_ctx", "n_vocab", "n_embd", "token_bos", "token_eos",
              "token_nl", "pooling_type", "tokenizer", "logits_to_logprobs", "longest_token_prefix",
              "from_pretrained", "close")


def signatures(cls: Any) -> Dict[str, List[List[str]]]:
    import inspect

    out = {}
    for name in SIGNATURES:
        params = inspect.signature(getattr(cls, name)).parameters.values()
        out[name] = [[p.name, p.kind.name, "<required>" if p.default is p.empty else repr(p.default)]
                     for p in params]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="GGUF (default: llamapy's default model, Gemma 3 270M)")
    ap.add_argument("--no-repack", action="store_true", help="disable llama.cpp's weight repacking (AMX crash)")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    import llama_cpp
    import llama_cpp.llama_cpp as lib

    if args.no_repack:
        default_params = lib.llama_model_default_params

        def params():
            p = default_params()
            p.use_extra_bufts = False
            return p

        lib.llama_model_default_params = params
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    model = args.model
    if model is None:
        from llamapy.default_model import default_model_path

        model = default_model_path()
    llm = llama_cpp.Llama(model, n_ctx=256, logits_all=True, verbose=False, seed=1, chat_format="gemma")
    scripts = {name: script_tokens(llm, s) for name, s in SCRIPTS.items()}
    records: List[Dict[str, Any]] = []
    for prompt in PROMPTS:
        for case in CASES:
            kw = dict(case["kwargs"])
            proc = llama_cpp.LogitsProcessorList([forcing(scripts[case["script"]], llm.token_eos())])
            result = llm.create_completion(prompt, temperature=0.0, logits_processor=proc, **kw)
            records.append({"kind": "completion", "prompt": prompt, "script": case["script"], "kwargs": kw,
                            "expected": summary(result, kw.get("stream", False))})
    for name in CHAT_SCRIPTS:
        for stream in (False, True):
            proc = llama_cpp.LogitsProcessorList([forcing(scripts[name], llm.token_eos())])
            result = llm.create_chat_completion([{"role": "user", "content": "Say it"}], temperature=0.0,
                                                max_tokens=24, stream=stream, logits_processor=proc)
            if stream:
                chunks = list(result)
                text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
                finish = chunks[-1]["choices"][0]["finish_reason"]
            else:
                text, finish = result["choices"][0]["message"]["content"], result["choices"][0]["finish_reason"]
            records.append({"kind": "chat", "script": name, "stream": stream,
                            "expected": {"content": text, "finish_reason": finish}})
    data = {"llama_cpp_python": llama_cpp.__version__, "model": Path(model).name, "scripts": SCRIPTS,
            "token_ids": scripts, "records": records, "signatures": signatures(llama_cpp.Llama)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(records)} records to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
