"""A tiny byte-level BPE tokenizer (Hugging Face `tokenizers` format) shared by the MoE fixtures.

What this is: 256 byte tokens + merges learned on a short fixed corpus (deterministic), then
each family's own special tokens appended as added tokens. Written as tokenizer.json +
tokenizer_config.json so `AutoTokenizer` (and so llama.cpp's convert_hf_to_gguf.py) loads it.
What it is not: any released model's vocabulary. Its pre-tokenizer hash is unknown to the
converter, hence tools/moe/tokpre_shim.py.
"""
from __future__ import annotations

import json
import pathlib

N_BPE = 320  # 256 byte tokens + 64 merges

CORPUS = (
    "the quick brown fox jumps over the lazy dog. a mixture of experts routes every token "
    "to a few experts. the router picks the top two. shared experts see every token. "
    "attention sinks, sliding windows and rotary positions. hello world, this is a test. "
)

# Special tokens per family (the real models' names; ids follow the BPE vocab).
SPECIALS = {
    "qwen3moe": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "gptoss": ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>",
               "<|channel|>", "<|start|>", "<|end|>", "<|message|>", "<|call|>"],
    "deepseek": ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>",
                 "<｜Assistant｜>"],
    "glm4moe": ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>",
                "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"],
    # the dense fixtures (tools/dense/dense_models.py)
    "smollm3": ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"],
    "olmo2": ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"],
    "olmo3": ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"],
    "granite": ["<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>"],
}
# bos / eos per family (None: not set)
BOS_EOS = {
    "qwen3moe": (None, "<|im_end|>"),
    "gptoss": ("<|startoftext|>", "<|return|>"),
    "deepseek": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "glm4moe": (None, "<|endoftext|>"),
    "smollm3": (None, "<|im_end|>"),
    "olmo2": (None, "<|endoftext|>"),
    "olmo3": (None, "<|im_end|>"),
    "granite": ("<|end_of_text|>", "<|end_of_text|>"),
}


def train(work: pathlib.Path) -> pathlib.Path:
    """Trains the shared byte-level BPE (one pass over a fixed corpus; deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out = work / "bpe"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "base_tokenizer.json"
    if path.exists():
        return path
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=N_BPE, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator([CORPUS] * 20, trainer=trainer)
    tok.save(str(path))
    return path


def write(family: str, base: pathlib.Path, out: pathlib.Path) -> int:
    """Writes tokenizer.json + tokenizer_config.json for `family` into out/; returns n_vocab."""
    from tokenizers import AddedToken, Tokenizer

    tok = Tokenizer.from_file(str(base))
    n_base = tok.get_vocab_size()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in SPECIALS[family]])
    tok.save(str(out / "tokenizer.json"))
    bos, eos = BOS_EOS[family]
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096,
           "bos_token": bos, "eos_token": eos, "add_bos_token": bos is not None,
           "clean_up_tokenization_spaces": False}
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1, ensure_ascii=False))
    return n_base + len(SPECIALS[family])
