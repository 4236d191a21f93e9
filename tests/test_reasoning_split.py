"""Reasoning in chat replies: gpt-oss's harmony channels and <think> tags
split into reasoning_content, content and tool calls, whole and streamed
(llamapy/chat/reasoning.py, harmony.py), and through create_chat_completion
with the models' real templates and a scripted model (tests/chat_helpers.py)."""
from __future__ import annotations

import io
import json
import random
import re
from pathlib import Path

import pytest

from chat_helpers import ScriptedLlama
from llamapy.chat.reasoning import reply_splitter, split_reply

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]

ANSWER = ("<|channel|>analysis<|message|>The user asks about Paris. I know: <sunny>.<|end|>"
          "<|start|>assistant<|channel|>final<|message|>It is sunny in Paris.")
CALL = ("<|channel|>analysis<|message|>Need the weather tool.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city":"Paris"}')
CALL_TO_FIRST = ('<|channel|>analysis<|message|>Call it.<|end|><|start|>assistant to=functions.get_weather'
                 '<|channel|>commentary json<|message|>{"city": "Paris"}')
PREAMBLE = ("<|channel|>commentary<|message|>Let me check.<|end|>"
            "<|start|>assistant<|channel|>commentary to=functions.get_weather json<|message|>{}")
THINK = "<think>\nThe user greets me; 2 < 3.\n</think>\n\nHello! How can I help?"

HARMONY_CASES = {
    "answer": (ANSWER, "The user asks about Paris. I know: <sunny>.", "It is sunny in Paris.", []),
    "call": (CALL, "Need the weather tool.", "", [("get_weather", '{"city":"Paris"}')]),
    "call_recipient_first": (CALL_TO_FIRST, "Call it.", "", [("get_weather", '{"city": "Paris"}')]),
    "preamble": (PREAMBLE, "", "Let me check.", [("get_weather", "{}")]),
    "final_only": ("<|channel|>final<|message|>Hi <|user|> there", "", "Hi <|user|> there", []),
    "not_harmony": ("Plain text, <|channel|> later.", "", "Plain text, <|channel|> later.", []),
    # a call whose arguments are not JSON (malformed, or cut at max_tokens) is no call: its text stays
    "call_args_not_json": ('<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>commentary '
                           'to=functions.get_weather <|constrain|>json<|message|>{"ci', "Hm.", '{"ci', []),
    "header_cut": ("<|channel|>analysis<|message|>Thinking<|end|><|start|>assistant<|chan", "Thinking", "", []),
    "end_markers_kept_out": ("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final"
                             "<|message|>b<|end|>", "a", "b", []),
}


def calls_of(calls):
    return [(c["function"]["name"], c["function"]["arguments"]) for c in calls]


def token_pieces(text):
    """Roughly as a tokenizer would give it: each marker whole, words with their leading space."""
    return [p for p in re.findall(r"<\|[a-z]+\|>|\s*[^\s<]+|\s+|<", text) if p]


def streamed(syntax, pieces):
    splitter = reply_splitter(syntax)
    out = []
    for p in pieces:
        out += splitter.push(p)
    out += splitter.finish()
    return ("".join(v for k, v in out if k == "reasoning"), "".join(v for k, v in out if k == "content"),
            [v for k, v in out if k == "call"], out)


# ------------------------------------------------------------------ the splitters
@pytest.mark.parametrize("key", sorted(HARMONY_CASES))
def test_harmony_reply_split(key):
    text, reasoning, content, calls = HARMONY_CASES[key]
    r, c, k = split_reply("harmony", text)
    assert (r, c, calls_of(k)) == (reasoning, content, calls)
    assert all(call["type"] == "function" and call["id"].startswith("call_") for call in k)
    for pieces in (token_pieces(text), list(text)):
        sr, sc, sk, out = streamed("harmony", pieces)
        assert (sr, sc, calls_of(sk)) == (reasoning, content, calls)
        if key != "not_harmony" and key != "final_only":
            assert not any("<|" in v for kind, v in out if kind != "call")


def test_harmony_stream_gives_reasoning_before_the_answer_ends():
    splitter = reply_splitter("harmony")
    first = [p for piece in token_pieces(ANSWER)[:6] for p in splitter.push(piece)]
    assert first and all(kind == "reasoning" for kind, _ in first)
    assert splitter.push("<|e") == []  # may begin <|end|>: held back
    assert splitter.push("nd|>") == []


THINK_CASES = {
    "tags": ("think", THINK, "The user greets me; 2 < 3.", "Hello! How can I help?"),
    "no_tags": ("think", "  Hello there.", "", "  Hello there."),
    "empty_block": ("think", "<think>\n\n</think>\n\nHi", "", "Hi"),
    "opened_by_prompt": ("think-open", "\nLet me see.\n</think>\nParis.", "Let me see.", "Paris."),
    "opened_twice": ("think-open", "<think>Hmm.</think>Ok", "Hmm.", "Ok"),
    "never_closed": ("think", "<think>Still thinking </th", "Still thinking </th", ""),
    "later_tags_are_content": ("think", "Sure. <think>x</think>", "", "Sure. <think>x</think>"),
    # the prompt closed an empty block (thinking off): the newline GLM-4.6 writes after it is no content
    "closed_by_prompt": ("think-closed", "\n\nParis is sunny.\n", "", "Paris is sunny.\n"),
}


@pytest.mark.parametrize("key", sorted(THINK_CASES))
def test_think_reply_split(key):
    syntax, text, reasoning, content = THINK_CASES[key]
    assert split_reply(syntax, text) == (reasoning, content, [])
    for pieces in (token_pieces(text), list(text)):
        sr, sc, sk, out = streamed(syntax, pieces)
        assert (sr, sc, sk) == (reasoning, content, [])
        assert not any("think>" in v for kind, v in out if key != "later_tags_are_content")


def test_any_chunking_gives_the_whole_reply_split():
    rng = random.Random(33)
    cases = [("harmony", v[0]) for v in HARMONY_CASES.values()] + [(v[0], v[1]) for v in THINK_CASES.values()]
    for syntax, text in cases:
        want = split_reply(syntax, text)
        for _ in range(20):
            cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 12))))
            pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
            r, c, k, _ = streamed(syntax, pieces)
            assert (r, c, calls_of(k)) == (want[0], want[1], calls_of(want[2])), (syntax, pieces)


def test_plain_replies_pass_through():
    assert split_reply(None, " <think>x</think> ") == ("", " <think>x</think> ", [])


# ------------------------------------------------------------------ chat completions
@pytest.fixture(scope="module")
def templates(llama_cpp_sdist):
    folder = Path(llama_cpp_sdist) / "vendor" / "llama.cpp" / "models" / "templates"
    files = {"gpt-oss": "openai-gpt-oss-120b", "qwen3": "Qwen-Qwen3-0.6B", "deepseek-v3.1": "deepseek-ai-DeepSeek-V3.1"}
    return {name: (folder / f"{file}.jinja").read_text(encoding="utf-8") for name, file in files.items()}


def model(templates, name, reply):
    return ScriptedLlama(reply, metadata={"general.architecture": "gemma3", "tokenizer.chat_template": templates[name]})


def prompt_text(llm, call=-1):
    return llm.detokenize(llm.calls[call]["prompt"], special=True).decode()


def collect(chunks):
    """A stream's (reasoning, content, [(name, arguments)], finish_reason), its shape checked."""
    chunks = list(chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    reasoning = content = ""
    calls = {}
    for c in chunks:
        delta = c["choices"][0]["delta"]
        reasoning += delta.get("reasoning_content") or ""
        content += delta.get("content") or ""
        for tc in delta.get("tool_calls", []):
            calls[tc["index"]] = (tc["function"]["name"], tc["function"]["arguments"])
            assert tc["id"].startswith("call_") and tc["type"] == "function"
    return reasoning, content, [calls[i] for i in sorted(calls)], chunks[-1]["choices"][0]["finish_reason"]


def whole(r):
    msg = r["choices"][0]["message"]
    return (msg.get("reasoning_content") or "", msg["content"] or "", calls_of(msg.get("tool_calls", [])),
            r["choices"][0]["finish_reason"])


def test_gpt_oss_answer(templates):
    llm = model(templates, "gpt-oss", ANSWER + "<|return|><|start|>assistant<|channel|>final<|message|>more")
    r = llm.create_chat_completion(USER)
    assert r["choices"][0]["message"] == {"role": "assistant", "content": "It is sunny in Paris.",
                                          "reasoning_content": "The user asks about Paris. I know: <sunny>."}
    assert r["choices"][0]["finish_reason"] == "stop"
    assert prompt_text(llm).endswith("<|start|>user<|message|>What is the weather in Paris?<|end|><|start|>assistant")
    assert llm.calls[-1]["stop"][:2] == ["<|return|>", "<|call|>"] and "<|end|>" not in llm.calls[-1]["stop"]
    assert collect(llm.create_chat_completion(USER, stream=True)) == whole(r)


def test_gpt_oss_tool_call(templates):
    llm = model(templates, "gpt-oss", CALL + "<|call|><|start|>functions.get_weather to=assistant")
    r = llm.create_chat_completion(USER, tools=[WEATHER])
    assert whole(r) == ("Need the weather tool.", "", [("get_weather", '{"city":"Paris"}')], "tool_calls")
    assert r["choices"][0]["message"]["content"] is None
    assert "type get_weather = (_: {\ncity: string,\n}) => any;" in prompt_text(llm)
    assert collect(llm.create_chat_completion(USER, tools=[WEATHER], stream=True)) == whole(r)


def test_gpt_oss_history_renders_reasoning_and_calls(templates):
    history = USER + [
        {"role": "assistant", "content": None, "reasoning_content": "I call the tool.",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "22 C"}]
    llm = model(templates, "gpt-oss", "<|channel|>final<|message|>22 C.")
    r = llm.create_chat_completion(history, tools=[WEATHER])
    assert r["choices"][0]["message"]["content"] == "22 C."
    assert prompt_text(llm).endswith(
        "<|start|>assistant<|channel|>analysis<|message|>I call the tool.<|end|>"
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'
        '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"22 C"<|end|>'
        "<|start|>assistant")


def test_reasoning_format_none_leaves_the_raw_text(templates):
    llm = model(templates, "gpt-oss", ANSWER)
    r = llm.create_chat_completion(USER, reasoning_format="none")
    assert r["choices"][0]["message"] == {"role": "assistant", "content": ANSWER}
    assert collect(llm.create_chat_completion(USER, reasoning_format="none", stream=True)) == whole(r)
    llm = model(templates, "qwen3", THINK)
    assert whole(llm.create_chat_completion(USER, reasoning_format="none"))[:2] == ("", THINK)
    assert whole(llm.create_chat_completion(USER, reasoning_format="deepseek"))[:2] == \
        ("The user greets me; 2 < 3.", "Hello! How can I help?")
    with pytest.raises(ValueError, match="reasoning_format must be one of auto, deepseek, none"):
        llm.create_chat_completion(USER, reasoning_format="deepseek-legacy")


def test_qwen3_think_tags_and_tool_call(templates):
    llm = model(templates, "qwen3", THINK)
    r = llm.create_chat_completion(USER)
    assert whole(r) == ("The user greets me; 2 < 3.", "Hello! How can I help?", [], "stop")
    assert collect(llm.create_chat_completion(USER, stream=True)) == whole(r)
    call = ('<think>\nI need the tool.\n</think>\n\n'
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    llm = model(templates, "qwen3", call)
    r = llm.create_chat_completion(USER, tools=[WEATHER])
    assert whole(r) == ("I need the tool.", "", [("get_weather", '{"city": "Paris"}')], "tool_calls")
    assert collect(llm.create_chat_completion(USER, tools=[WEATHER], stream=True)) == whole(r)


def test_prompt_that_opens_think(templates):
    from llamapy.chat.completion import resolve_chat_handler

    llm = model(templates, "deepseek-v3.1", "The user wants Paris.</think>Sunny.")
    handler = resolve_chat_handler(llm)
    r = handler(llama=llm, messages=USER, thinking=True)  # a template variable (the server's chat_template_kwargs)
    assert prompt_text(llm).endswith("<\uff5cAssistant\uff5c><think>")
    assert whole(r) == ("The user wants Paris.", "Sunny.", [], "stop")
    assert collect(handler(llama=llm, messages=USER, stream=True, thinking=True)) == whole(r)
    # Without thinking the prompt closes the block: the reply is all content.
    llm.reply = "Sunny."
    assert whole(handler(llama=llm, messages=USER)) == ("", "Sunny.", [], "stop")
    assert prompt_text(llm).endswith("<think></think>")


def test_chat_template_kwargs_reach_the_template(templates):
    """create_chat_completion(chat_template_kwargs=...) as the server's request field: Qwen3's
    enable_thinking=False closes the think block in the prompt, and the reply is content."""
    llm = model(templates, "qwen3", "Sunny.")
    r = llm.create_chat_completion(USER, chat_template_kwargs={"enable_thinking": False})
    assert prompt_text(llm).endswith("<think>\n\n</think>\n\n")
    assert whole(r) == ("", "Sunny.", [], "stop")
    llm.create_chat_completion(USER)
    assert not prompt_text(llm).endswith("</think>\n\n")
    with pytest.raises(ValueError, match="temperature"):
        llm.create_chat_completion(USER, chat_template_kwargs={"temperature": 1})
    with pytest.raises(ValueError, match="dict"):
        llm.create_chat_completion(USER, chat_template_kwargs=["enable_thinking"])


def test_a_grammar_turns_the_split_off(templates):
    llm = model(templates, "qwen3", '{"a": 1}')
    r = llm.create_chat_completion(USER, response_format={"type": "json_object"})
    assert r["choices"][0]["message"] == {"role": "assistant", "content": '{"a": 1}'}
    assert json.loads(r["choices"][0]["message"]["content"]) == {"a": 1}


def test_chat_command_shows_thinking_and_keeps_answers(templates):
    from llamapy.chat.cli import chat_loop

    llm = model(templates, "qwen3", THINK)
    out = io.StringIO()
    assert chat_loop(llm, io.StringIO("Hi\nAgain\n"), out) == 0
    assert out.getvalue().count("[thinking] The user greets me; 2 < 3.\nHello! How can I help?\n") == 2
    assert prompt_text(llm).endswith("<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
                                     "<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n")


def test_template_syntax_from_the_template_text():
    from llamapy.chat.reasoning import template_syntax

    data = Path(__file__).parent / "data" / "chat_templates"
    # DeepSeek-R1-Distill's first template only cuts </think> blocks out of earlier answers.
    assert template_syntax((data / "deepseek-r1-distill-qwen-32b.jinja").read_text(encoding="utf-8")) == "think"
    for name in ("qwen2.5-7b-instruct", "llama-3.1-8b-instruct", "gemma-3-it", "phi-3-mini-4k-instruct"):
        assert template_syntax((data / f"{name}.jinja").read_text(encoding="utf-8")) is None, name
