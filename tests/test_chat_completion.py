"""create_chat_completion over llamapy's real completion code, with a
scripted model (tests/chat_helpers.py): responses, chunks, usage, BOS, stop
strings, content parts, tools, grammars, logprobs, handlers, compat names."""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from chat_helpers import N_BYTE_BASE, SPECIALS, ScriptedLlama
from llamapy.chat import completion as chat_completion
from conftest import needs

DATA = Path(__file__).parent / "data" / "chat_templates"
USER = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def prompt_text(llm: ScriptedLlama, call: int = -1) -> str:
    return llm.detokenize(llm.calls[call]["prompt"], special=True).decode()


def collect(chunks):
    """Chunks -> (content, tool calls by index, finish_reason, usage), checking the stream's shape."""
    chunks = list(chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert len({c["id"] for c in chunks}) == 1 and all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    content, calls = "", {}
    for c in chunks:
        delta = c["choices"][0]["delta"]
        content += delta.get("content") or ""
        for tc in delta.get("tool_calls", []):
            entry = calls.setdefault(tc["index"], {"id": None, "name": None, "arguments": ""})
            entry["id"] = tc.get("id", entry["id"])
            entry["name"] = tc.get("function", {}).get("name", entry["name"])
            entry["arguments"] += tc["function"].get("arguments", "")
    return content, calls, chunks[-1]["choices"][0]["finish_reason"], chunks[-1].get("usage")


@pytest.fixture
def schemas(monkeypatch):
    """Record the JSON schemas the chat layer asks grammars for."""
    seen = []
    monkeypatch.setattr(chat_completion, "json_grammar", lambda schema: seen.append(schema) or ("grammar", schema))
    return seen


def test_response_shape_and_usage():
    llm = ScriptedLlama("Paris.", chat_format="gemma")
    r = llm.create_chat_completion(USER)
    assert r["id"].startswith("chatcmpl-") and r["object"] == "chat.completion" and r["model"] == "scripted.gguf"
    assert r["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "Paris."}, "logprobs": None,
                             "finish_reason": "stop"}]
    n_prompt = len(llm.calls[-1]["prompt"])
    assert r["usage"] == {"prompt_tokens": n_prompt, "completion_tokens": 6, "total_tokens": n_prompt + 6}
    assert prompt_text(llm) == ("<bos><start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n"
                                "<start_of_turn>model\n")
    assert llm.calls[-1]["temperature"] == 0.2 and llm.calls[-1]["stop"] == ["<end_of_turn>", "<eos>"]


@pytest.mark.parametrize("reply", ["Paris is the capital of France.", "Ünïcödé ✓ and emoji 🙂 too", ""])
def test_stream_matches_non_stream(reply):
    llm = ScriptedLlama(reply, chat_format="chatml")
    whole = llm.create_chat_completion(USER, seed=1)
    content, calls, finish, usage = collect(llm.create_chat_completion(USER, seed=1, stream=True))
    assert content == whole["choices"][0]["message"]["content"] == reply
    assert calls == {} and finish == whole["choices"][0]["finish_reason"] == "stop"
    assert usage == whole["usage"]


def test_max_tokens_gives_length():
    llm = ScriptedLlama("a long answer", chat_format="chatml")
    r = llm.create_chat_completion(USER, max_tokens=3)
    assert r["choices"][0]["message"]["content"] == "a l" and r["choices"][0]["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] == 3
    assert collect(llm.create_chat_completion(USER, max_tokens=3, stream=True))[2] == "length"


def test_end_of_turn_stops_generation():
    # As text (a marker the vocabulary does not know as a token) it is a stop string ...
    llm = ScriptedLlama("Paris<|im_end|>\n<|im_start|>user\nmore", chat_format="chatml")
    assert llm.create_chat_completion(USER)["choices"][0]["message"]["content"] == "Paris"
    # ... and as a token it is an end of generation.
    eot = SPECIALS.index("<end_of_turn>")
    llm = ScriptedLlama([N_BYTE_BASE + ord("O"), N_BYTE_BASE + ord("k"), eot, N_BYTE_BASE + ord("!")],
                        chat_format="gemma")
    r = llm.create_chat_completion(USER)
    assert r["choices"][0]["message"]["content"] == "Ok" and r["usage"]["completion_tokens"] == 2


def test_user_stop_strings_come_first():
    llm = ScriptedLlama("one, two, three", chat_format="llama-3", bos="<|begin_of_text|>", eos="<|eot_id|>")
    r = llm.create_chat_completion(USER, stop=", three")
    assert r["choices"][0]["message"]["content"] == "one, two"
    assert llm.calls[-1]["stop"] == [", three", "<|eot_id|>", "<|eom_id|>"]


def test_single_bos_when_the_template_writes_it():
    bos = SPECIALS.index("<|begin_of_text|>")
    llm = ScriptedLlama("ok", chat_format="llama-3", bos="<|begin_of_text|>", eos="<|eot_id|>")
    llm.create_chat_completion(USER)
    assert llm.calls[-1]["prompt"][:2] == [bos, SPECIALS.index("<|start_header_id|>")]
    assert llm.calls[-1]["prompt"].count(bos) == 1
    # The template has no BOS: the tokenizer adds it (vocabulary says so) or not.
    llm = ScriptedLlama("ok", chat_format="chatml")
    llm.create_chat_completion(USER)
    assert llm.calls[-1]["prompt"][:2] == [SPECIALS.index("<bos>"), SPECIALS.index("<|im_start|>")]
    llm = ScriptedLlama("ok", chat_format="chatml", add_bos=False)
    llm.create_chat_completion(USER)
    assert llm.calls[-1]["prompt"][0] == SPECIALS.index("<|im_start|>")


def test_gguf_template_is_used_with_its_bos_and_stops():
    template = (DATA / "gemma-3-it.jinja").read_text(encoding="utf-8")
    llm = ScriptedLlama("Paris.", metadata={"general.architecture": "gemma3", "tokenizer.chat_template": template})
    r = llm.create_chat_completion([{"role": "system", "content": "Be brief."}] + USER)
    assert r["choices"][0]["message"]["content"] == "Paris."
    assert prompt_text(llm) == ("<bos><start_of_turn>user\nBe brief.\n\nWhat is the capital of France?<end_of_turn>\n"
                                "<start_of_turn>model\n")
    assert llm.calls[-1]["prompt"].count(SPECIALS.index("<bos>")) == 1
    assert llm.calls[-1]["stop"] == ["<end_of_turn>", "<eos>"]


def test_content_parts():
    llm = ScriptedLlama("ok", chat_format="chatml")
    llm.create_chat_completion([{"role": "user", "content": [{"type": "text", "text": "Hello, "},
                                                             {"type": "text", "text": "world"}]}])
    assert "<|im_start|>user\nHello, world<|im_end|>" in prompt_text(llm)
    with pytest.raises(ValueError, match="'image_url' content part needs a multimodal chat handler"):
        llm.create_chat_completion([{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}])
    with pytest.raises(ValueError, match="non-empty list"):
        llm.create_chat_completion([])
    with pytest.raises(ValueError, match="'role'"):
        llm.create_chat_completion([{"content": "no role"}])


def test_tools_for_a_format_without_tool_support():
    llm = ScriptedLlama(CALL, chat_format="gemma")
    r = llm.create_chat_completion([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Paris?"}],
                                   tools=[WEATHER])
    prompt = prompt_text(llm)
    assert prompt.startswith("<bos><start_of_turn>user\nBe brief.\n\nYou can call functions")
    assert json.dumps(WEATHER) in prompt and prompt.endswith("Paris?<end_of_turn>\n<start_of_turn>model\n")
    msg, choice = r["choices"][0]["message"], r["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and msg["content"] is None
    assert msg["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert msg["tool_calls"][0]["id"].startswith("call_") and "function_call" not in msg

    content, calls, finish, _ = collect(llm.create_chat_completion(USER, tools=[WEATHER], stream=True))
    assert content == "" and finish == "tool_calls"
    assert calls[0]["name"] == "get_weather" and json.loads(calls[0]["arguments"]) == {"city": "Paris"}


def test_tool_history_is_written_as_text_for_such_formats():
    llm = ScriptedLlama("It is sunny.", chat_format="gemma")
    history = USER + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "22 C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "sunny"}]
    r = llm.create_chat_completion(history, tools=[WEATHER])
    assert r["choices"][0]["message"] == {"role": "assistant", "content": "It is sunny."}
    prompt = prompt_text(llm)
    assert ('<start_of_turn>model\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            '</tool_call><end_of_turn>\n') in prompt
    assert ("<start_of_turn>user\n<tool_response>\n22 C\n</tool_response>\n<tool_response>\nsunny\n"
            "</tool_response><end_of_turn>\n<start_of_turn>model\n") in prompt
    # Without tools on offer (tool_choice="none", or none given) the history is still written out.
    for kwargs in ({"tools": [WEATHER], "tool_choice": "none"}, {}):
        r = llm.create_chat_completion(history, **kwargs)
        assert r["choices"][0]["message"] == {"role": "assistant", "content": "It is sunny."}
        assert "<tool_response>\n22 C" in prompt_text(llm) and "You can call functions" not in prompt_text(llm)


def test_tools_with_a_template_that_supports_them():
    template = (DATA / "qwen2.5-7b-instruct.jinja").read_text(encoding="utf-8")
    llm = ScriptedLlama("Checking.\n" + CALL, bos="<|im_start|>", eos="<|im_end|>", add_bos=False,
                        metadata={"general.architecture": "qwen2", "tokenizer.chat_template": template})
    r = llm.create_chat_completion(USER, tools=[WEATHER])
    prompt = prompt_text(llm)
    assert "# Tools" in prompt and json.dumps(WEATHER) in prompt and "You can call functions" not in prompt
    msg = r["choices"][0]["message"]
    assert msg["content"] == "Checking." and len(msg["tool_calls"]) == 1
    content, calls, finish, _ = collect(llm.create_chat_completion(USER, tools=[WEATHER], stream=True))
    assert content.strip() == "Checking." and calls[0]["name"] == "get_weather" and finish == "tool_calls"


def test_tool_choice_none_and_plain_answers():
    llm = ScriptedLlama("No tools needed.", chat_format="chatml")
    r = llm.create_chat_completion(USER, tools=[WEATHER], tool_choice="none")
    assert "get_weather" not in prompt_text(llm)
    assert r["choices"][0] == {"index": 0, "message": {"role": "assistant", "content": "No tools needed."},
                               "logprobs": None, "finish_reason": "stop"}
    r = llm.create_chat_completion(USER, tools=[WEATHER])  # auto, but the model answers in prose
    assert r["choices"][0]["message"] == {"role": "assistant", "content": "No tools needed."}
    with pytest.raises(ValueError, match="'nope', which is not among the tools"):
        llm.create_chat_completion(USER, tools=[WEATHER],
                                   tool_choice={"type": "function", "function": {"name": "nope"}})


def test_forced_tool_choice_uses_the_parameters_schema(schemas):
    llm = ScriptedLlama('{"city": "Paris"}', chat_format="chatml")
    choice = {"type": "function", "function": {"name": "get_weather"}}
    r = llm.create_chat_completion(USER, tools=[WEATHER], tool_choice=choice)
    assert schemas == [WEATHER["function"]["parameters"]]
    assert llm.calls[-1]["grammar"] == ("grammar", WEATHER["function"]["parameters"])
    msg = r["choices"][0]["message"]
    assert r["choices"][0]["finish_reason"] == "tool_calls" and msg["content"] is None
    assert msg["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}

    content, calls, finish, usage = collect(llm.create_chat_completion(USER, tools=[WEATHER], tool_choice=choice,
                                                                       stream=True))
    assert content == "" and finish == "tool_calls" and usage == r["usage"]
    assert calls[0]["name"] == "get_weather" and calls[0]["arguments"] == '{"city": "Paris"}'
    assert calls[0]["id"].startswith("call_")


def test_required_tool_choice_and_legacy_functions(schemas):
    other = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    llm = ScriptedLlama('{"name": "get_weather", "arguments": {"city": "Paris"}}', chat_format="chatml")
    r = llm.create_chat_completion(USER, tools=[WEATHER, other], tool_choice="required")
    assert [o["properties"]["name"]["const"] for o in schemas[0]["anyOf"]] == ["get_weather", "get_time"]
    assert schemas[0]["anyOf"][0]["properties"]["arguments"] == WEATHER["function"]["parameters"]
    assert r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    assert collect(llm.create_chat_completion(USER, tools=[WEATHER, other], tool_choice="required",
                                              stream=True))[1][0]["name"] == "get_weather"

    llm = ScriptedLlama('{"city": "Paris"}', chat_format="chatml")
    r = llm.create_chat_completion(USER, functions=[WEATHER["function"]], function_call={"name": "get_weather"})
    msg = r["choices"][0]["message"]
    assert msg["function_call"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert msg["tool_calls"][0]["function"] == msg["function_call"]


@pytest.mark.parametrize("response_format, good, bad", [
    ({"type": "json_object"}, '{"a": 1}', "[1]"),
    ({"type": "json_object", "schema": {"type": "array", "items": {"type": "integer"}}}, "[1, 2]", '{"a": 1}'),
    ({"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer"}}}, "42", '"42"'),
])
def test_response_format_becomes_a_grammar(response_format, good, bad):
    llm = ScriptedLlama(good, chat_format="chatml")
    r = llm.create_chat_completion(USER, response_format=response_format)
    grammar = llm.calls[-1]["grammar"]
    assert grammar.matches(good) and not grammar.matches(bad)
    assert r["choices"][0]["message"]["content"] == good


def test_text_response_format_keeps_the_callers_grammar():
    from llamapy.grammar import LlamaGrammar

    mine = LlamaGrammar.from_string('root ::= "yes" | "no"')
    llm = ScriptedLlama("yes", chat_format="chatml")
    llm.create_chat_completion(USER, response_format={"type": "text"}, grammar=mine)
    assert llm.calls[-1]["grammar"] is mine
    llm.create_chat_completion(USER)
    assert llm.calls[-1]["grammar"] is None


def test_bad_response_format():
    with pytest.raises(ValueError, match="response_format type"):
        ScriptedLlama("x", chat_format="chatml").create_chat_completion(USER, response_format={"type": "yaml"})


def test_tool_grammars_accept_calls_and_reject_prose():
    other = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    forced = chat_completion.json_grammar(WEATHER["function"]["parameters"])
    assert forced.matches('{"city": "Paris"}') and not forced.matches("Paris") and not forced.matches("{}")
    required = chat_completion.json_grammar(chat_completion._required_call_schema([WEATHER, other]))
    assert required.matches('{"name": "get_weather", "arguments": {"city": "Paris"}}')
    assert required.matches('{"name": "get_time", "arguments": {}}')
    assert not required.matches('{"name": "get_date", "arguments": {}}')


def test_unsupported_parameter_schema_falls_back_to_any_object(caplog):
    with caplog.at_level(logging.WARNING, logger="llamapy"):
        grammar = chat_completion.json_grammar({"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}})
    assert "cannot be turned into a grammar" in caplog.text and "#/nowhere" in caplog.text
    assert grammar.matches('{"anything": [1, 2]}') and not grammar.matches("[]")


def test_logprobs_in_chat_shape():
    llm = ScriptedLlama("Hi!", chat_format="chatml")
    r = llm.create_chat_completion(USER, logprobs=True, top_logprobs=2)
    content = r["choices"][0]["logprobs"]["content"]
    assert [c["token"] for c in content] == ["H", "i", "!"]
    for c in content:
        assert c["bytes"] == list(c["token"].encode()) and c["logprob"] <= 0
        assert len(c["top_logprobs"]) == 2 and c["top_logprobs"][0]["token"] == c["token"]
    assert llm.calls[-1]["logprobs"] == 2
    streamed = [c["choices"][0]["logprobs"] for c in llm.create_chat_completion(USER, logprobs=True, top_logprobs=2,
                                                                                 stream=True)]
    assert [e["token"] for lp in streamed if lp for e in lp["content"]] == ["H", "i", "!"]
    assert llm.create_chat_completion(USER)["choices"][0]["logprobs"] is None


def test_custom_chat_handler_gets_llama_cpp_python_keywords():
    seen = {}

    def handler(*, llama, messages, **kwargs):
        seen.update(kwargs, llama=llama, messages=messages)
        return {"handled": True}

    llm = ScriptedLlama(chat_handler=handler)
    assert llm.create_chat_completion(USER, temperature=0.5, max_tokens=7) == {"handled": True}
    assert seen["llama"] is llm and seen["messages"] == USER
    assert seen["temperature"] == 0.5 and seen["max_tokens"] == 7 and seen["repeat_penalty"] == 1.0
    assert {"functions", "function_call", "tools", "tool_choice", "stream", "stop", "seed", "response_format",
            "logits_processor", "grammar", "logit_bias", "logprobs", "top_logprobs"} <= set(seen)


def test_template_variables_reach_jinja_templates():
    llm = ScriptedLlama("ok", metadata={"tokenizer.chat_template": "{{ messages[0].content }}|{{ enable_thinking }}"})
    handler = chat_completion.resolve_chat_handler(llm)
    handler(llama=llm, messages=USER, enable_thinking=False)
    assert prompt_text(llm).endswith("What is the capital of France?|False")


def test_openai_v1_types():
    openai = needs("openai")
    llm = ScriptedLlama(CALL, chat_format="chatml")
    r = chat_completion.create_chat_completion_openai_v1(llm, USER, tools=[WEATHER])
    assert isinstance(r, openai.types.chat.ChatCompletion)
    assert r.choices[0].message.tool_calls[0].function.name == "get_weather"
    chunks = list(chat_completion.create_chat_completion_openai_v1(llm, USER, stream=True))
    assert all(isinstance(c, openai.types.chat.ChatCompletionChunk) for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].usage.total_tokens > 0


def test_openai_v1_without_openai(monkeypatch):
    for name in [m for m in sys.modules if m == "openai" or m.startswith("openai.")] + ["openai"]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match="pip install openai"):
        chat_completion.create_chat_completion_openai_v1(ScriptedLlama(chat_format="chatml"), USER)


def test_llama_chat_format_compat_names():
    from llamapy import llama_chat_format as lcf

    template = (DATA / "qwen2.5-7b-instruct.jinja").read_text(encoding="utf-8")
    formatter = lcf.Jinja2ChatFormatter(template, eos_token="<|im_end|>", bos_token="")
    result = formatter(messages=USER)
    assert isinstance(result, lcf.ChatFormatterResponse) and result.added_special and result.stop == ["<|im_end|>"]
    assert result.prompt.endswith("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")

    llm = ScriptedLlama("Paris.", chat_handler=formatter.to_chat_handler())
    assert llm.create_chat_completion(USER)["choices"][0]["message"]["content"] == "Paris."

    @lcf.register_chat_format("test-shout")
    def shout(messages, **kwargs):
        return lcf.ChatFormatterResponse(prompt="".join(m["content"].upper() for m in messages) + "\n", stop=["\n"])

    llm = ScriptedLlama("quiet\nignored", chat_format="test-shout")
    assert llm.create_chat_completion(USER)["choices"][0]["message"]["content"] == "quiet"
    assert prompt_text(llm) == "<bos>WHAT IS THE CAPITAL OF FRANCE?\n"
    assert lcf.get_chat_completion_handler("test-shout") is not None
    with pytest.raises(lcf.LlamaChatCompletionHandlerNotFoundException, match="known formats"):
        lcf.get_chat_completion_handler("no-such-format")

    config = {"chat_template": template, "bos_token": None,
              "eos_token": {"__type": "AddedToken", "content": "<|im_end|>"}}
    # As llama-cpp-python: the generation prompt is an empty assistant message (closed by the template).
    assert lcf.hf_tokenizer_config_to_chat_formatter(config)(messages=USER).prompt == result.prompt + "<|im_end|>\n"
