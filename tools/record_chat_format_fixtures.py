"""Record llama-cpp-python's chat prompts as test fixtures.

Renders a generated set of conversations through every chat format
llama-cpp-python registers (its formatters, found through the registered
handlers) and through ``Jinja2ChatFormatter`` / ``hf_tokenizer_config_to_chat_formatter``
with real chat templates, and writes the prompts and stop strings to
tests/data/chat_format_fixtures.json. tests/test_chat_format_fixtures.py
compares llamapy's renders with them byte for byte.

Needs llama-cpp-python (the version in tests/conftest.py) importable as
``llama_cpp`` and its sdist unpacked (for the templates in
vendor/llama.cpp/models/templates)::

    python tools/record_chat_format_fixtures.py --sdist /path/to/llama_cpp_python-0.3.36

For each case the recorder also finds the messages llama-cpp-python leaves
out of the prompt (by rendering the conversation with a unique marker as
each message's text and looking for the markers), and whether the prompt is
that of the conversation without them: llamapy keeps such messages (see
llamapy/chat/named_formats.py), so for those cases the tests compare the
reduced conversation.
"""
from __future__ import annotations

import argparse
import datetime
import copy
import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

S = {"role": "system", "content": "You are terse."}


def u(text: Any) -> Dict[str, Any]:
    return {"role": "user", "content": text}


def a(text: Any) -> Dict[str, Any]:
    return {"role": "assistant", "content": text}


CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}

# name -> messages. Small on purpose: each one probes one thing, and together
# they cover multi-turn, system placement, whitespace, empty and odd content, roles.
CONVERSATIONS: Dict[str, List[Dict[str, Any]]] = {
    "user": [u("Hi!")],
    "user_spaces": [u("  Hi there  ")],
    "user_newlines": [u("\nline one\nline two\n\n")],
    "user_tabs_and_space_only": [u("\t"), a(" "), u("ok")],
    "user_unicode": [u("Grüße, 世界! 🚀 — ça va?")],
    "user_special_text": [u("say <|im_end|> and </s> and [INST] literally")],
    "user_empty": [u("")],
    "system_user": [S, u("Hi!")],
    "system_empty": [{"role": "system", "content": ""}, u("Hi!")],
    "system_spaces": [{"role": "system", "content": "  padded system\n"}, u(" padded user ")],
    "system_only": [S],
    "multi_turn": [u("Hi!"), a("Hello."), u("What is 2+2?")],
    "multi_turn_system": [S, u("Hi!"), a("Hello."), u("What is 2+2?")],
    "multi_turn_spaces": [S, u(" Hi! "), a(" Hello. "), u("What is 2+2?\n")],
    "assistant_last": [u("Hi!"), a("Hello.")],
    "assistant_last_system": [S, u("Hi!"), a("Hello.")],
    "three_pairs": [S, u("one"), a("1"), u("two"), a("2"), u("three"), a("3"), u("four")],
    "assistant_empty": [u("Hi!"), a(""), u("again")],
    "assistant_none": [u("Hi!"), a(None), u("again")],
    "consecutive_users": [u("first"), u("second")],
    "consecutive_assistants": [u("q"), a("a1"), a("a2")],
    "assistant_first": [a("I start."), u("ok")],
    "system_middle": [u("Hi!"), S, u("next")],
    "two_systems": [S, u("Hi!"), {"role": "system", "content": "Now be verbose."}, u("More?")],
    "tool_result": [u("Weather in Oslo?"), {"role": "assistant", "content": None, "tool_calls": [CALL]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 3}"}],
    "function_role": [u("Weather?"), {"role": "function", "name": "get_weather", "content": "cold"}],
    "developer_role": [{"role": "developer", "content": "Be safe."}, u("Hi!")],
    "other_role": [u("run it"), {"role": "ipython", "content": "42"}],
    "content_parts": [u([{"type": "text", "text": "part one "}, {"type": "text", "text": "part two"}])],
    "long_content": [S, u("word " * 60)],
}

# Conversations for the Jinja templates (they reject some of the above by design).
JINJA_CONVERSATIONS = ["user", "user_spaces", "user_newlines", "user_unicode", "user_empty", "system_user",
                       "multi_turn", "multi_turn_system", "multi_turn_spaces", "assistant_last", "three_pairs",
                       "consecutive_users", "tool_result", "content_parts"]

# Real templates (vendor/llama.cpp/models/templates) and the BOS/EOS texts of their models.
TEMPLATES = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("", "<|im_end|>"),
    "Qwen-Qwen3-0.6B.jinja": ("", "<|im_end|>"),
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "google-gemma-2-2b-it.jinja": ("<bos>", "<eos>"),
    "microsoft-Phi-3.5-mini-instruct.jinja": ("<s>", "<|endoftext|>"),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("<s>", "</s>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": ("<\uff5cbegin\u2581of\u2581sentence\uff5c>",
                                                       "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": ("<|begin_of_text|>", "<|im_end|>"),
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                            "parameters": {"type": "object",
                                                           "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}]


def _marker(i: int) -> str:
    return f"\u27e6m{i}\u27e7"


def _marked(messages: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    out = []
    for i, m in enumerate(messages):
        m = dict(m)
        m["content"] = [{"type": "text", "text": _marker(i)}] if isinstance(m.get("content"), list) else _marker(i)
        out.append(m)
    return out


def _render(formatter: Callable[..., Any], messages: List[Dict[str, Any]], **kwargs: Any) -> Dict[str, Any]:
    try:
        r = formatter(messages=copy.deepcopy(messages), **kwargs)
    except Exception as e:  # recorded: llamapy is expected to fail too (or knowingly not)
        return {"error": type(e).__name__, "message": str(e)[:200]}
    return {"prompt": r.prompt, "stop": r.stop, "added_special": r.added_special}


def _drops(formatter: Callable[..., Any], messages: List[Dict[str, Any]], prompt: str) -> Dict[str, Any]:
    """Which messages the prompt leaves out, and whether leaving them out of
    the conversation ("dropped") or emptying their content ("emptied") gives
    the same prompt."""
    marked = _render(formatter, _marked(messages)).get("prompt", "")
    missing = [i for i in range(len(messages)) if _marker(i) not in marked]
    # Tool calls are not content: they are left out when their function's name is not in the prompt.
    no_calls = [i for i, m in enumerate(messages) if m.get("tool_calls")
                and any(c["function"]["name"] not in marked for c in m["tool_calls"])]
    if not missing and not no_calls:
        return {}
    dropped, emptied = [], []
    for i in missing:
        without = messages[:i] + messages[i + 1:]
        if _render(formatter, without).get("prompt") == prompt:
            dropped.append(i)
        else:
            emptied.append(i)
    reduced = [dict({k: v for k, v in m.items() if not (k == "tool_calls" and i in no_calls)},
                    content=None if i in emptied else m.get("content"))
               for i, m in enumerate(messages) if i not in dropped]
    return {"dropped": dropped, "emptied": emptied, "calls_dropped": no_calls,
            "reduced_ok": _render(formatter, reduced).get("prompt") == prompt}


def named_formatters() -> Dict[str, Callable[..., Any]]:
    """Every registered format's formatter: register_chat_format wraps each
    one in a handler closure, so the formatter is found in that closure."""
    from llama_cpp import llama_chat_format as lcf

    out = {}
    for name, handler in lcf.LlamaChatCompletionHandlerRegistry()._chat_handlers.items():
        cells = [c.cell_contents for c in (getattr(handler, "__closure__", None) or ())]
        found = [c for c in cells if callable(c) and getattr(c, "__module__", "") == lcf.__name__
                 and getattr(c, "__name__", "").startswith("format")]
        if found:
            out[name] = found[0]
    return out


def record(sdist: Path) -> Dict[str, Any]:
    import llama_cpp
    from llama_cpp import llama_chat_format as lcf

    formatters = named_formatters()
    named: List[Dict[str, Any]] = []
    for fmt, formatter in sorted(formatters.items()):
        for conv_name, messages in CONVERSATIONS.items():
            case = {"format": fmt, "function": formatter.__name__, "conversation": conv_name,
                    **_render(formatter, messages)}
            if "prompt" in case:
                case.update(_drops(formatter, messages, case["prompt"]))
            named.append(case)

    templates = {name: (sdist / "vendor/llama.cpp/models/templates" / name).read_text(encoding="utf-8")
                 for name in TEMPLATES}
    templates.update({"CHATML_CHAT_TEMPLATE": lcf.CHATML_CHAT_TEMPLATE,
                      "MISTRAL_INSTRUCT_CHAT_TEMPLATE": lcf.MISTRAL_INSTRUCT_CHAT_TEMPLATE,
                      "MIXTRAL_INSTRUCT_CHAT_TEMPLATE": lcf.MIXTRAL_INSTRUCT_CHAT_TEMPLATE,
                      "LLAMA3_INSTRUCT_CHAT_TEMPLATE": lcf.LLAMA3_INSTRUCT_CHAT_TEMPLATE})
    tokens = dict(TEMPLATES, CHATML_CHAT_TEMPLATE=("<s>", "<|im_end|>"), MISTRAL_INSTRUCT_CHAT_TEMPLATE=("<s>", "</s>"),
                  MIXTRAL_INSTRUCT_CHAT_TEMPLATE=("<s>", "</s>"),
                  LLAMA3_INSTRUCT_CHAT_TEMPLATE=("<|begin_of_text|>", "<|eot_id|>"))
    jinja: List[Dict[str, Any]] = []
    for tname, source in templates.items():
        bos, eos = tokens[tname]
        for conv_name in JINJA_CONVERSATIONS:
            messages = CONVERSATIONS[conv_name]
            variants = [("jinja", {"add_generation_prompt": True}, {}),
                        ("jinja", {"add_generation_prompt": False}, {}),
                        ("hf_tokenizer_config", {"add_generation_prompt": True}, {}),
                        ("hf_tokenizer_config", {"add_generation_prompt": False}, {})]
            if conv_name in ("user", "tool_result"):
                variants.append(("jinja", {"add_generation_prompt": True}, {"tools": TOOLS}))
            for kind, init, call in variants:
                if kind == "jinja":
                    formatter = lcf.Jinja2ChatFormatter(source, eos_token=eos, bos_token=bos, **init)
                else:
                    formatter = lcf.hf_tokenizer_config_to_chat_formatter(
                        {"chat_template": source, "bos_token": bos, "eos_token": eos}, **init)
                jinja.append({"template": tname, "kind": kind, "conversation": conv_name, "init": init,
                              "call": call, "bos_token": bos, "eos_token": eos,
                              **_render(formatter, messages, **call)})
    # Templates that print strftime_now(...) render the recording day: the
    # tests render with the clock set to it.
    return {"llama_cpp_python": llama_cpp.__version__, "recorded_on": datetime.date.today().isoformat(),
            "conversations": CONVERSATIONS, "templates": templates,
            "tools": TOOLS, "named": named, "jinja": jinja}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", type=Path, required=True, help="the unpacked llama-cpp-python sdist")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "tests/data/chat_format_fixtures.json")
    args = ap.parse_args(argv)
    data = record(args.sdist)
    args.out.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    n_named = sum("prompt" in c for c in data["named"])
    n_jinja = sum("prompt" in c for c in data["jinja"])
    print(f"{args.out}: {n_named} named-format prompts ({len(data['named'])} cases), "
          f"{n_jinja} template prompts ({len(data['jinja'])} cases)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
