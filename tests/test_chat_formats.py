"""Named chat formats render the models' documented prompts; the format is
chosen as llama-cpp-python chooses it."""
from __future__ import annotations

import logging

import pytest

from chat_helpers import ScriptedLlama
from llamapy.chat.completion import FormatHandler, get_chat_completion_handler, resolve_chat_handler
from llamapy.chat.formats import FORMATS, get_format, guess_chat_format_from_gguf_metadata

S, U1, A1, U2 = "Be brief.", "Hi!", "Hello.", "What is 2+2?"
CONV = [{"role": "system", "content": S}, {"role": "user", "content": U1},
        {"role": "assistant", "content": A1}, {"role": "user", "content": U2}]
TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}

# Written from each format's documentation (model cards / original repositories).
EXPECTED = {
    "chatml": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
              "Hello.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "llama-3": "<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
               "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
               "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "llama-2": "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi! [/INST] Hello. </s><s>[INST] What is 2+2? [/INST]",
    "mistral-instruct": "<s>[INST] Be brief.\n\nHi! [/INST]Hello.</s>[INST] What is 2+2? [/INST]",
    "gemma": "<s><start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
             "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "phi-3": "<|system|>\nBe brief.<|end|>\n<|user|>\nHi!<|end|>\n<|assistant|>\nHello.<|end|>\n"
             "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n",
    "zephyr": "<|system|>\nBe brief.</s>\n<|user|>\nHi!</s>\n<|assistant|>\nHello.</s>\n<|user|>\nWhat is 2+2?</s>\n"
              "<|assistant|>\n",
    "openchat": "<s>Be brief.<|end_of_turn|>GPT4 Correct User: Hi!<|end_of_turn|>GPT4 Correct Assistant: Hello."
                "<|end_of_turn|>GPT4 Correct User: What is 2+2?<|end_of_turn|>GPT4 Correct Assistant:",
    "alpaca": "Be brief.\n\n### Instruction:\nHi!\n\n### Response:\nHello.\n\n### Instruction:\nWhat is 2+2?\n\n"
              "### Response:\n",
    "vicuna": "Be brief. USER: Hi! ASSISTANT: Hello.</s>USER: What is 2+2? ASSISTANT:",
    "qwen": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
            "Hello.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "saiga": "<s>system\nBe brief.</s><s>user\nHi!</s><s>bot\nHello.</s><s>user\nWhat is 2+2?</s><s>bot\n",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_named_format_renders_documented_prompt(name):
    assert get_format(name).render(CONV, **TOKENS) == EXPECTED[name]


def test_default_system_prompts():
    user = [{"role": "user", "content": "Hi!"}]
    assert get_format("qwen").render(user) == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                                               "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n")
    assert get_format("vicuna").render(user).startswith("A chat between a curious user and an artificial intelligence")


def test_merged_system_without_user_and_no_system():
    gemma = get_format("gemma")
    assert gemma.render([{"role": "user", "content": " Hi! "}], bos_token="<bos>") == \
        "<bos><start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\n"
    assert gemma.render([{"role": "system", "content": "Rules."}], bos_token="") == \
        "<start_of_turn>user\nRules.\n\n<end_of_turn>\n<start_of_turn>model\n"


def test_no_generation_prompt_and_unknown_role():
    assert get_format("chatml").render(CONV[:2], add_generation_prompt=False).endswith("Hi!<|im_end|>\n")
    with pytest.raises(ValueError, match="no place for messages with role 'tool'"):
        get_format("gemma").render([{"role": "tool", "content": "x"}])


def test_every_format_renders_and_names_itself():
    for name, fmt in FORMATS.items():
        assert fmt.name == name
        out = fmt.render(CONV, **TOKENS)
        assert "Hi!" in out and "What is 2+2?" in out, name


def test_stop_strings_are_end_of_turn_markers():
    assert get_format("chatml").stop == ("<|im_end|>",)
    assert "<|eot_id|>" in get_format("llama-3").stop
    assert get_format("gemma").stop == ("<end_of_turn>",)


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


def test_guess_from_template_markers():
    assert guess_chat_format_from_gguf_metadata({}) is None
    assert guess_chat_format_from_gguf_metadata({"tokenizer.chat_template": CHATML_TEMPLATE}) == "chatml"
    assert guess_chat_format_from_gguf_metadata({"tokenizer.chat_template": "<start_of_turn>"}) == "gemma"
