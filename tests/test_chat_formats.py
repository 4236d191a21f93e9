"""Named chat formats render llama-cpp-python's prompts (the recorded
fixtures check every format at length: test_chat_format_fixtures.py); the
format is chosen as llama-cpp-python chooses it."""
from __future__ import annotations

import logging

import pytest

from chat_helpers import ScriptedLlama
from llamapy.chat.completion import FormatHandler, get_chat_completion_handler, resolve_chat_handler
from llamapy.chat.formats import FORMATS, get_format
from llamapy.llama_chat_format import guess_chat_format_from_gguf_metadata, CHATML_CHAT_TEMPLATE as LCF_CHATML

S, U1, A1, U2 = "Be brief.", "Hi!", "Hello.", "What is 2+2?"
CONV = [{"role": "system", "content": S}, {"role": "user", "content": U1},
        {"role": "assistant", "content": A1}, {"role": "user", "content": U2}]
TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}
VICUNA = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
          "detailed, and polite answers to the user's questions.")

# llama-cpp-python 0.3.36's prompts for CONV, quirks included (zephyr's double
# newline, alpaca's missing response header, llama-2's spacing); where it drops
# a message (gemma's and mistral-instruct's system message, saiga's assistant)
# llamapy keeps it, marked "kept".
EXPECTED = {
    "chatml": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
              "Hello.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "llama-3": "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
               "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
               "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "llama-2": "[INST] <<SYS>>\nBe brief.\n<</SYS>> Hi! [/INST]Hello. </s><s>[INST]What is 2+2?  [/INST]",
    "mistral-instruct": "[INST] Be brief.\n\nHi! [/INST]Hello.</s>[INST] What is 2+2? [/INST]",  # kept
    "gemma": "<start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
             "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",  # kept
    "phi-3": "<|system|>\nBe brief.<|end|>\n<|user|>\nHi!<|end|>\n<|assistant|>\nHello.<|end|>\n"
             "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n",  # llamapy's own (llama-cpp-python has no phi-3)
    "zephyr": "<|system|>\nBe brief.</s>\n<|user|>\n\nHi!</s>\n<|assistant|>\n\nHello.</s>\n<|user|>\n\n"
              "What is 2+2?</s>\n<|assistant|>\n\n",
    "openchat": "Be brief.<|end_of_turn|><|end_of_turn|>\nGPT4 Correct User: \nHi!<|end_of_turn|>\n<|end_of_turn|>"
                "GPT4 Correct Assistant: \nHello.<|end_of_turn|>\nGPT4 Correct User: \nWhat is 2+2?<|end_of_turn|>\n"
                "<|end_of_turn|>GPT4 Correct Assistant: \n",
    "alpaca": "Be brief.\n\n### Instruction: Hi!\n\n### Response: Hello.</s>### Instruction: What is 2+2?\n\n",
    "vicuna": VICUNA + " USER: Be brief.\n\nHi! ASSISTANT: Hello.</s>USER: What is 2+2? ASSISTANT:",  # kept
    "qwen": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
            "Hello.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "saiga": "<s>system\nBe brief.</s><s>user\nHi!</s><s>bot\nHello.</s><s>user\nWhat is 2+2?</s><s>bot",  # kept
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_named_format_renders_llama_cpp_python_prompt(name):
    assert get_format(name).render(CONV, **TOKENS) == EXPECTED[name]


def test_default_system_prompts():
    user = [{"role": "user", "content": "Hi!"}]
    assert get_format("qwen").render(user) == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                                               "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n")
    assert get_format("vicuna").render(user).startswith(VICUNA)


def test_dropped_system_is_kept_in_the_next_user_turn():
    gemma = get_format("gemma")
    assert gemma.render([{"role": "user", "content": " Hi! "}]) == \
        "<start_of_turn>user\n Hi! <end_of_turn>\n<start_of_turn>model\n"
    # No user message after it: the system message becomes one.
    assert gemma.render([{"role": "system", "content": "Rules."}]) == \
        "<start_of_turn>user\nRules.<end_of_turn>\n<start_of_turn>model\n"
    # A second system message (llama-cpp-python keeps only the first) goes to the next user turn.
    two = CONV[:2] + [{"role": "system", "content": "Now verbose."}, {"role": "user", "content": "More?"}]
    assert get_format("chatml").render(two).endswith(
        "<|im_start|>user\nNow verbose.\n\nMore?<|im_end|>\n<|im_start|>assistant\n")


def test_no_generation_prompt_and_other_roles():
    assert get_format("chatml").render(CONV[:2], add_generation_prompt=False).endswith("Hi!<|im_end|>\n")
    # Roles llama-cpp-python drops: a named turn where the format names roles, else a user turn.
    tool = [{"role": "user", "content": "run"}, {"role": "ipython", "content": "42"}]
    assert "<|im_start|>ipython\n42<|im_end|>\n" in get_format("chatml").render(tool)
    assert "<start_of_turn>user\n42<end_of_turn>\n" in get_format("gemma").render(tool)


def test_every_format_renders_and_names_itself():
    for name, fmt in FORMATS.items():
        assert fmt.name == name
        out = fmt.render(CONV, **TOKENS)
        assert all(m["content"] in out for m in CONV), name


def test_stop_strings_are_end_of_turn_markers():
    assert get_format("chatml").stop == ("<|im_end|>",)
    assert "<|eot_id|>" in get_format("llama-3").stop
    assert get_format("gemma").stop == ("<end_of_turn>",)
    assert get_format("pygmalion").stop == ("\n",)  # llama-cpp-python's


def test_unknown_format_lists_known_ones():
    with pytest.raises(ValueError, match=r"unknown chat format 'nope'; known formats: .*chatml.*gemma"):
        get_format("nope")
    llm = ScriptedLlama("x", chat_format="nope")
    with pytest.raises(ValueError, match="known formats: .*llama-3"):
        llm.create_chat_completion([{"role": "user", "content": "hi"}])


CHATML_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                   "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_selection_order_handler_format_template_guess(caplog):
    meta = {"general.architecture": "gemma3", "tokenizer.chat_template": CHATML_TEMPLATE,
            "tokenizer.chat_template.tool_use": CHATML_TEMPLATE + "{{ tools }}"}
    custom = lambda **kw: "custom"  # noqa: E731
    assert resolve_chat_handler(ScriptedLlama(metadata=meta, chat_handler=custom, chat_format="gemma")) is custom
    by_name = resolve_chat_handler(ScriptedLlama(metadata=meta, chat_format="gemma"))
    assert by_name.format is FORMATS["gemma"]
    from_gguf = resolve_chat_handler(ScriptedLlama(metadata=meta))
    assert from_gguf.format.name == "chat_template.default" and from_gguf.format.stop == ("<|im_end|>", "<eos>")
    assert resolve_chat_handler(ScriptedLlama(metadata=meta), tools_requested=True).format.name == \
        "chat_template.tool_use"
    with caplog.at_level(logging.INFO, logger="llamapy"):
        guessed = resolve_chat_handler(ScriptedLlama(metadata={"general.architecture": "gemma3"}))
    assert guessed.format is FORMATS["gemma"]
    assert "no chat template; using chat format 'gemma'" in caplog.text
    assert resolve_chat_handler(ScriptedLlama(metadata={"general.architecture": "llama"})).format.name == "llama-2"
    assert resolve_chat_handler(ScriptedLlama(metadata={"general.architecture": "qwen2"})).format.name == "qwen"


def test_gguf_named_templates_as_chat_formats():
    meta = {"tokenizer.chat_template": CHATML_TEMPLATE, "tokenizer.chat_template.rag": "RAG {{ documents }}"}
    h = get_chat_completion_handler("chat_template.rag", meta)
    assert isinstance(h, FormatHandler) and h.format.render([], documents=["d"]) == "RAG ['d']"
    assert get_chat_completion_handler("chat_template.default", meta).format.render(
        [{"role": "user", "content": "x"}]) == "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(ValueError, match="chat_template.rag"):
        get_chat_completion_handler("chat_template.missing", meta)


def test_guess_from_exact_templates():
    # As llama-cpp-python: only the exact templates of ChatML, Mistral/Mixtral and Llama 3 Instruct.
    assert guess_chat_format_from_gguf_metadata({}) is None
    assert guess_chat_format_from_gguf_metadata({"tokenizer.chat_template": LCF_CHATML}) == "chatml"
    assert guess_chat_format_from_gguf_metadata({"tokenizer.chat_template": CHATML_TEMPLATE}) is None
