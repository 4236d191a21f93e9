"""Record llama.cpp's special-token behaviour (through llama-cpp-python) on
the tokenizer test vocabularies of the llama-cpp-python sdist and on Gemma 3
270M, for tests/test_tokenizer_llama_cpp_specials.py. Run by hand where
llama-cpp-python is installed (it is never a llamapy dependency):

    python tools/record_vocab_fixtures.py SDIST_ROOT tests/data/llama_cpp_vocab_specials.json

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

The JSON holds, per vocabulary: the file name (or "gemma-3-270m" for the
default model), n_vocab, the recorded attributes and EOG flags of the probed
ids, the full EOG list, and the cases. Compact: one list per case, detokenized
bytes in hex.
"""
from __future__ import annotations

import json
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
    return {
        "vocab": label,
        "n_vocab": n,
        "attrs": [[i, attrs[i]] for i in probe_ids],
        "eog": eog,
        "tokenize": tokenize,
        "detokenize": detok,
    }


def main() -> None:
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
