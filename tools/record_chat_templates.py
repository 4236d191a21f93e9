"""Records how Hugging Face transformers renders seven reasoning models' chat
templates, for tests/test_chat_template_transformers.py.

Usage (from the repo root; needs transformers 5 and tokenizers, which are not
llamapy dependencies):

    python tools/record_chat_templates.py --templates SDIST/vendor/llama.cpp/models/templates \
        [--out tests/data/chat_templates/transformers_renders.json]

The templates are read from the llama.cpp tree that llama-cpp-python's sdist
vendors (the tests read the same files through the ``llama_cpp_sdist``
fixture); their SHA-256 goes into the output, so a different copy is noticed.
Each conversation is written the way an OpenAI client sends it (tool-call
arguments as a JSON string, reasoning as ``reasoning_content``); transformers
gets it the way its documentation asks (arguments as an object). Every render
goes through ``PreTrainedTokenizerFast.apply_chat_template`` with the model's
BOS/EOS texts as special tokens, and with the date frozen (gpt-oss prints
today's date through ``strftime_now``). A render that raises is recorded as
``{"error": message}``. This script is a fixture generator, not part of llamapy.
"""
from __future__ import annotations

import argparse
import copy
import datetime as _dt
import hashlib
import json
import pathlib
import sys

FROZEN_DATE = (2025, 8, 5)

# file name in the templates folder -> (BOS text, EOS text), from each model's tokenizer_config.json
TEMPLATES = {
    "openai-gpt-oss-120b.jinja": ("<|startoftext|>", "<|return|>"),
    "Qwen-Qwen3-0.6B.jinja": ("", "<|im_end|>"),
    "Qwen3-Coder.jinja": ("", "<|im_end|>"),
    "deepseek-ai-DeepSeek-V3.1.jinja": ("<\uff5cbegin\u2581of\u2581sentence\uff5c>",
                                        "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    "GLM-4.6.jinja": ("", "<|endoftext|>"),
    "Qwen3.5-4B.jinja": ("", "<|im_end|>"),
    "google-gemma-4-31B-it.jinja": ("<bos>", "<eos>"),
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name."}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Get the local time somewhere.",
        "parameters": {"type": "object", "properties": {
            "place": {"type": "string"},
            "format": {"type": "string", "enum": ["12h", "24h"], "default": "24h"},
            "with_seconds": {"type": "boolean"}},
            "required": ["place"]}}},
]
TOOL_ROUND = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "reasoning_content": "The user wants the weather; I call get_weather.",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "22 C, sunny"},
]

CONVERSATIONS = {
    "system_user": dict(messages=[SYSTEM, {"role": "user", "content": "What is the capital of France?"}]),
    "multi_turn_reasoning": dict(messages=[
        SYSTEM, {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello! How can I help?", "reasoning_content": "The user greets me."},
        {"role": "user", "content": "What is 2+2?"}]),
    "tool_call": dict(messages=[SYSTEM] + TOOL_ROUND, tools=TOOLS),
    "tool_round_then_question": dict(messages=[SYSTEM] + TOOL_ROUND + [
        {"role": "assistant", "content": "It is 22 C and sunny in Paris."},
        {"role": "user", "content": "And in Berlin?"}], tools=TOOLS),
    "unicode_and_kwargs": dict(messages=[{"role": "user", "content": "Grüße! ¿Qué tal? 你好"}]),
    "no_generation_prompt": dict(messages=[
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "A greeting."}],
        add_generation_prompt=False),
}

# Template variables of the "unicode_and_kwargs" case, per template (the switches each one documents).
KWARGS = {
    "openai-gpt-oss-120b.jinja": {"reasoning_effort": "high", "model_identity": "You are a test model."},
    "Qwen-Qwen3-0.6B.jinja": {"enable_thinking": False},
    "Qwen3-Coder.jinja": {},
    "deepseek-ai-DeepSeek-V3.1.jinja": {"thinking": True},
    "GLM-4.6.jinja": {"enable_thinking": False},
    "Qwen3.5-4B.jinja": {"enable_thinking": False},
    "google-gemma-4-31B-it.jinja": {"enable_thinking": True},
}


def for_transformers(messages: list) -> list:
    """OpenAI-shaped messages as transformers' documentation writes them: arguments as objects."""
    out = copy.deepcopy(messages)
    for m in out:
        for call in m.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--templates", required=True, help="llama.cpp's models/templates folder")
    ap.add_argument("--out", default="tests/data/chat_templates/transformers_renders.json")
    args = ap.parse_args()

    import jinja2
    import tokenizers
    import transformers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast
    from transformers.utils import chat_template_utils

    class FrozenDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz=None):  # noqa: ANN206 - the one method strftime_now calls
            return cls(*FROZEN_DATE)

    chat_template_utils.datetime = FrozenDatetime  # strftime_now reads this module global when called

    folder = pathlib.Path(args.templates)
    renders, templates = {}, {}
    for name, (bos, eos) in TEMPLATES.items():
        source = (folder / name).read_text(encoding="utf-8")
        templates[name] = {"sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(), "bos_token": bos,
                           "eos_token": eos, "kwargs": KWARGS[name]}
        special = {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v}
        tok = PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")),
                                      **special)
        renders[name] = {}
        for case, conv in CONVERSATIONS.items():
            kwargs = KWARGS[name] if case == "unicode_and_kwargs" else {}
            try:
                text = tok.apply_chat_template(for_transformers(conv["messages"]), tools=conv.get("tools"),
                                               chat_template=source, tokenize=False,
                                               add_generation_prompt=conv.get("add_generation_prompt", True),
                                               **kwargs)
                renders[name][case] = text
            except Exception as e:  # noqa: BLE001 - recorded: llamapy must fail on the same conversation
                renders[name][case] = {"error": f"{type(e).__name__}: {e}"}
    out = {"generator": "tools/record_chat_templates.py",
           "versions": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                        "jinja2": jinja2.__version__, "python": sys.version.split()[0]},
           "date": "%04d-%02d-%02d" % FROZEN_DATE, "templates": templates, "conversations": CONVERSATIONS,
           "renders": renders}
    path = pathlib.Path(args.out)
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    n_err = sum(isinstance(r, dict) for t in renders.values() for r in t.values())
    print(f"wrote {path}: {sum(len(t) for t in renders.values())} renders ({n_err} errors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
