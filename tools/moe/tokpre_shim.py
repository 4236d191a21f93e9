"""Runs llama.cpp's `convert_hf_to_gguf.py` with a named BPE pre-tokenizer.

What this is: a shim. The converter identifies a BPE tokenizer's pre-tokenizer by hashing how
it splits a fixed test string, and refuses hashes it does not know. The fixtures' tiny
tokenizer (tools/moe/tokenizer.py) is unknown to it, so this replaces only that lookup
(`TextModel.get_vocab_base_pre`) with the name given here (e.g. `qwen2`, `gpt-4o`,
`deepseek-v3`, `glm4`: the name the real family's GGUFs carry in `tokenizer.ggml.pre`), then
runs the script unchanged. Everything else (tensors, hyperparameters, vocab) is the
converter's own.
Usage: python tokpre_shim.py PRE_NAME PATH/TO/convert_hf_to_gguf.py ARGS...
"""
import pathlib
import runpy
import sys

pre = sys.argv[1]
script = sys.argv[2]
sys.path.insert(0, str(pathlib.Path(script).resolve().parent))

from conversion import base  # noqa: E402  (llama.cpp's own converter package)

base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = [script] + sys.argv[3:]
runpy.run_path(script, run_name="__main__")
