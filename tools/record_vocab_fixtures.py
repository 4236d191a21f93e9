"""Record llama.cpp's special-token behaviour (through llama-cpp-python) on
the tokenizer test vocabularies of the llama-cpp-python sdist and on Gemma 3
270M, for tests/test_tokenizer_llama_cpp_specials.py. Run by hand where
llama-cpp-python is installed (it is never a llamapy dependency):

    python tools/record_vocab_fixtures.py SDIST_ROOT tests/data/llama_cpp_vocab_specials.json
    python tools/record_vocab_fixtures.py --pre SDIST_ROOT tests/data/llama_cpp_pretokenizers.json

SDIST_ROOT is the unpacked llama_cpp_python-0.3.36 sdist (the tests'
`llama_cpp_sdist` fixture): its vendor/llama.cpp/models/ggml-vocab-*.gguf
files are the vocabularies. For each one, llama.cpp's token attributes (after
its load-time rules: text-detected EOG and FIM tokens, "unused" control
tokens, ...) choose the tokens to probe: a spread of every control,
user-defined, unknown, unused, byte and undefined token, normal tokens whose
text looks special, and a fixed list of special-looking strings whether or
not the vocabulary has them. Each probe text goes through
`Llama.tokenize(text, add_bos, special)` for the four flag combinations, alone,
embedded in text, with spaces and newlines around, doubled and cut short.
`Llama.detokenize(ids, special=...)` is recorded for the probed ids alone,
after BOS, in pairs, for the longest tokens, and for every byte token.

With --pre it records, for every tokenizer.ggml.pre value the vendored
llama.cpp accepts (read from its src/llama-vocab.cpp) and for the BPE-based
tokenizer models, the GPT-2 vocabulary (the Gemma 4 one for Gemma-4-style
pre-tokenizers) loaded with that value as a metadata override (and the
T5 unigram vocabulary as it is): the
tokenization of a text corpus (llama.cpp's own test inputs and more), the
add_bos behaviour, and llama_detokenize of spaced punctuation.

The JSON holds, per vocabulary: the file name (or "gemma-3-270m" for the
default model), n_vocab, the special token ids (BOS, EOS, EOT, SEP, newline,
pad, FIM) and add_bos/add_eos/add_sep, the recorded attributes and EOG flags of the probed
ids, the full EOG list, and the cases. Compact: one list per case, detokenized
bytes in hex.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import llama_cpp
from llama_cpp import Llama

# Strings that look like special tokens of some family; most vocabularies
# lack most of them, or have them as plain text.
FAKE_SPECIALS = [
    "</s>", "<s>", "<unk>", "<pad>", "<mask>", "<eos>", "<bos>", "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<|eot_id|>", "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<start_of_turn>",
    "<end_of_turn>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>", "<turn|>", "<|turn>",
    "<|tool_response>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<fim_prefix>", "<|file_sep|>",
    "<unused0>", "<unused99>", "<|reserved_special_token_0|>", "<|reserved_special_token_250|>", "<0x41>",
    "<0x0A>", "[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "[EOS]", "[EOT]", "<|channel|>", "<|message|>",
    "<|return|>", "<|call|>", "<think>", "</think>", "<image>", "<start_of_image>", "<|image_pad|>",
    "<|\u2581pad\u2581|>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "<EOT>", "<PRE>", "<|", "|>", "</", "<|im",
]
SPECIAL_LOOKING = re.compile(r"^(<[^<>\s]{1,40}>|\[[A-Za-z_]{2,20}\]|<\|[^\s]{0,40}\|?>?)$")
ATTR_CLASSES = {"unknown": 1, "unused": 2, "control": 8, "user_defined": 16, "byte": 32}
PER_CLASS = 12


def spread(ids: list, n: int) -> list:
    """n ids spread evenly over the sorted list, first and last included."""
    if len(ids) <= n:
        return list(ids)
    return sorted({ids[round(i * (len(ids) - 1) / (n - 1))] for i in range(n)})


def probe_texts(text: str) -> list:
    out = [text, "x" + text + "y", " " + text + " ", "Hi " + text + "\nok", text + text, "\n" + text + "  \n"]
    if len(text) > 2:
        out += [text[:-1], text[1:]]
    return out


def record(path: str, label: str) -> dict:
    llm = Llama(path, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    attrs = [int(llama_cpp.llama_vocab_get_attr(vocab, i)) for i in range(n)]
    texts = [llama_cpp.llama_vocab_get_text(vocab, i) for i in range(n)]
    eog = [i for i in range(n) if llama_cpp.llama_vocab_is_eog(vocab, i)]

    probe_ids: set = set()
    for bit in ATTR_CLASSES.values():
        probe_ids.update(spread([i for i in range(n) if attrs[i] & bit], PER_CLASS))
    probe_ids.update(spread([i for i in range(n) if attrs[i] == 0], PER_CLASS))
    looking = []
    for i in range(n):
        try:
            t = texts[i].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if attrs[i] & 4 and SPECIAL_LOOKING.match(t):
            looking.append(i)
    probe_ids.update(spread(looking, PER_CLASS))
    probe_ids.update(eog)
    for tid in (llama_cpp.llama_vocab_bos(vocab), llama_cpp.llama_vocab_eos(vocab)):
        if tid >= 0:
            probe_ids.add(tid)
    probe_ids = sorted(probe_ids)

    strings = []
    for i in probe_ids:
        try:
            strings.append(texts[i].decode("utf-8"))
        except UnicodeDecodeError:
            pass
    strings += [s for s in FAKE_SPECIALS if s not in strings]
    inputs, seen = [], set()
    for s in strings:
        for t in probe_texts(s):
            if t not in seen:
                seen.add(t)
                inputs.append(t)
    # Several specials of the vocabulary in one chat-like text.
    specials = [texts[i].decode("utf-8", "replace") for i in probe_ids if attrs[i] & (8 | 16)][:6]
    if specials:
        inputs.append("Hello " + " world ".join(specials) + " end")
        inputs.append("".join(specials) + "\n" + "".join(reversed(specials)))

    tokenize = []
    for t in inputs:
        b = t.encode("utf-8")
        tokenize.append([t] + [llm.tokenize(b, add_bos=ab, special=sp) for ab in (False, True) for sp in (False, True)])

    bos = llama_cpp.llama_vocab_bos(vocab)
    seqs = [[i] for i in probe_ids]
    if bos >= 0:
        seqs += [[bos, i] for i in probe_ids[:40]]
    seqs += [[probe_ids[k], probe_ids[-1 - k]] for k in range(min(20, len(probe_ids)))]
    longest = sorted(range(n), key=lambda i: (-len(texts[i]), i))[:8]
    seqs += [[i] for i in longest]
    seqs += [[i] for i in range(n) if attrs[i] & 32][:256]
    hello = llm.tokenize(b"Hello world", add_bos=True, special=False)
    seqs.append(hello + probe_ids[:10] + hello)
    detok = [[s, llm.detokenize(s, special=False).hex(), llm.detokenize(s, special=True).hex()] for s in seqs]
    special_ids = {k: int(getattr(llama_cpp, f"llama_vocab_{k}")(vocab))
                   for k in ("bos", "eos", "eot", "sep", "nl", "pad", "fim_pre", "fim_suf", "fim_mid", "fim_pad",
                             "fim_rep", "fim_sep")}
    flags = {k: bool(getattr(llama_cpp, f"llama_vocab_get_{k}")(vocab)) for k in ("add_bos", "add_eos", "add_sep")}
    return {
        "vocab": label,
        "n_vocab": n,
        "special_ids": special_ids,
        "flags": flags,
        "attrs": [[i, attrs[i]] for i in probe_ids],
        "eog": eog,
        "tokenize": tokenize,
        "detokenize": detok,
    }


EXTRA_TEXTS = [
    "Don'T WE'LL it's I'M you'RE they'Ve he'd", "ab1234 x12345678 9 99 999 9999 1,234,567.89", "a\r\nb\r\n\r\n  c",
    "\t\ttabs\t and   spaces   ", "trailing space ", " leading", "   ", "\n\n\n", "e\u0301t\u00e9 na\u0308ive \u0915\u093f",
    "\u0e01\u0e32\u0e23 \ud55c\uad6d\uc5b4 \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587abc\u4e2d",
    "CamelCaseWords HTTPServer iPhone", "x/y/z\n// comment /* c */", "<dna>acgtnACG</dna> and <dna>tt",
    "\u00a0nbsp\u2003em\u3000ideo", "!!! ??? ... ,,, ;;; :-) (a) [b] {c}", "\U0001f600\U0001f44d\U0001f3fd emoji",
]


def corpus(sdist: Path) -> list:
    texts = []
    for inp in sorted((sdist / "vendor" / "llama.cpp" / "models").glob("ggml-vocab-*.gguf.inp")):
        texts += inp.read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    out, seen = [], set()
    for t in texts + EXTRA_TEXTS:
        if t and t not in seen:
            seen.add(t)
            out.append(t)
    return out


def llama_detokenize(llm: Llama, ids: list) -> str:
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    arr = (llama_cpp.llama_token * len(ids))(*ids)
    buf = (llama_cpp.ctypes.c_char * 4096)()
    n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, len(buf), False, False)
    return bytes(buf[:n]).hex()


def in_child(fn, *args):
    """fn(*args) in a forked process: its result, or None if it crashed
    (GGML_NO_BACKTRACE: no debugger is attached to print one)."""
    os.environ["GGML_NO_BACKTRACE"] = "1"
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    p = ctx.Process(target=lambda: send.send(fn(*args)))
    p.start()
    result = None
    while p.is_alive() or recv.poll():
        if recv.poll(0.05):
            result = recv.recv()
            break
    p.join()
    return result if p.exitcode == 0 else None


def load(path: str, overrides: dict) -> Llama:
    return Llama(path, vocab_only=True, verbose=False, kv_overrides=overrides)


def tokenize_one(path: str, overrides: dict, text: str):
    return load(path, overrides).tokenize(text.encode("utf-8"), add_bos=False, special=False)


def record_pre_case(path: str, overrides: dict, texts: list, spaced: str) -> dict:
    llm = load(path, overrides)
    toks = [llm.tokenize(t.encode("utf-8"), add_bos=False, special=False) for t in texts]
    hello = llm.tokenize(b"Hello", add_bos=True, special=False)
    sp = llm.tokenize(spaced.encode("utf-8"), add_bos=False, special=False)
    return {"tokens": toks, "hello": hello, "detok": llama_detokenize(llm, sp)}


def record_pre(sdist: Path) -> dict:
    src = (sdist / "vendor" / "llama.cpp" / "src" / "llama-vocab.cpp").read_text(encoding="utf-8")
    names = list(dict.fromkeys(re.findall(r'tokenizer_pre == "([^"]+)"', src)))
    models = sdist / "vendor" / "llama.cpp" / "models"
    texts = corpus(sdist)
    spaced = " Hello , world ! it 's a ' b ' c 're d 'll ?"
    cases = []
    runs = [(name, {"tokenizer.ggml.pre": name}) for name in names]
    runs += [(m, {"tokenizer.ggml.model": m}) for m in ("whitespace", "hybriddna")]
    runs.append(("t5", {}))  # the unigram model, on its own vocabulary
    for label, overrides in runs:
        base = "ggml-vocab-gemma-4.gguf" if label in ("gemma4", "granite-embed-multi-311m", "sarvam-moe") else "ggml-vocab-gpt-2.gguf"
        if label == "t5":
            base = "ggml-vocab-nomic-bert-moe.gguf"
        path = str(models / base)
        case = in_child(record_pre_case, path, overrides, texts, spaced)
        if case is None:
            # llama.cpp aborts on some texts here (a BPE word with a space or a
            # newline hits an assertion in find_bpe_rank): those are null.
            toks = [in_child(tokenize_one, path, overrides, t) for t in texts]
            case = in_child(record_pre_case, path, overrides, [], spaced)
            case["tokens"] = toks
        cases.append(dict(name=label, overrides=overrides, vocab=base, **case))
    return {"llama_cpp_python": llama_cpp.__version__, "names": names, "texts": texts, "cases": cases}


def main() -> None:
    if sys.argv[1] == "--pre":
        sdist, out = Path(sys.argv[2]), Path(sys.argv[3])
        out.write_text(json.dumps(record_pre(sdist), ensure_ascii=False, separators=(",", ":")) + "\n",
                       encoding="utf-8")
        return
    sdist, out = Path(sys.argv[1]), Path(sys.argv[2])
    models = sorted((sdist / "vendor" / "llama.cpp" / "models").glob("ggml-vocab-*.gguf"))
    data = [record(str(p), p.name) for p in models]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from llamapy.default_model import default_model_path
    data.append(record(str(default_model_path()), "gemma-3-270m"))
    meta = {"llama_cpp_python": llama_cpp.__version__, "vocabs": data}
    out.write_text(json.dumps(meta, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
